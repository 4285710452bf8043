"""Gold Python: hours from ED registration to hospital admission for one admission (two decimals)."""

import polars as pl


def gold(tables, slots):
    adm = (
        tables["admissions"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("edregtime").is_not_null()
            & pl.col("admittime").is_not_null()
        )
        .collect()
    )
    hours = [round((r["admittime"] - r["edregtime"]).total_seconds() / 3600.0, 2) for r in adm.iter_rows(named=True)]
    return pl.DataFrame({"value": hours}, schema={"value": pl.Float64})
