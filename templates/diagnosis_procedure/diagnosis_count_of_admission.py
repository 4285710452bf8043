"""Gold Python: number of distinct (icd_code, icd_version) diagnoses of one admission."""

import polars as pl


def gold(tables, slots):
    rows = (
        tables["diagnoses_icd"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("icd_code").is_not_null()
            & pl.col("icd_version").is_not_null()
        )
        .collect()
    )
    if rows.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    return pl.DataFrame({"value": [rows.select("icd_code", "icd_version").unique().height]})
