"""Gold Python: percent of distinct admissions of one type with hospital_expire_flag = 1 (two decimals)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    adm = (
        tables["admissions"]
        .filter((concept_is("admission_type", slots["admission_type"])) & pl.col("hospital_expire_flag").is_not_null())
        .collect()
    )
    died = {}
    for row in adm.iter_rows(named=True):
        died[row["hadm_id"]] = died.get(row["hadm_id"], False) or row["hospital_expire_flag"] == 1
    if not died:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    return pl.DataFrame({"value": [round(100.0 * sum(died.values()) / len(died), 2)]})
