"""Gold Python: was a medication administered (eMAR) in the first 24 hours of an admission?"""

import datetime as dt

import polars as pl

from pipeline.concepts import administered_expr, concept_is


def gold(tables, slots):
    adm = (
        tables["admissions"]
        .filter((pl.col("hadm_id") == slots["hadm_id"]) & (pl.col("subject_id") == slots["subject_id"]))
        .select("hadm_id", "subject_id", "admittime")
        .collect()
    )
    given = (
        tables["emar"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & (concept_is("medication", slots["medication"]))
            & administered_expr("event_txt")
            & pl.col("charttime").is_not_null()
        )
        .collect()
    )
    if adm.height != 1 or given.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Boolean})
    admit = adm["admittime"][0]
    end = admit + dt.timedelta(hours=24)
    hit = any(admit <= t < end for t in given["charttime"].to_list())
    return pl.DataFrame({"value": [hit]})
