"""Gold Python: distinct organisms of specimens timed within the first 48 hours of one admission."""

import datetime as dt

import polars as pl


def gold(tables, slots):
    patient = (pl.col("subject_id") == slots["subject_id"]) & (pl.col("hadm_id") == slots["hadm_id"])
    admission = tables["admissions"].filter(patient).select("subject_id", "hadm_id", "admittime")
    grown = (
        tables["microbiologyevents"]
        .filter(patient & pl.col("org_name").is_not_null() & (pl.col("org_name") != "CANCELLED"))
        .join(admission, on=["subject_id", "hadm_id"])
        .filter(
            (pl.col("charttime") >= pl.col("admittime"))
            & (pl.col("charttime") < pl.col("admittime") + dt.timedelta(hours=48))
        )
        .collect()
    )
    return pl.DataFrame({"value": sorted(grown["org_name"].unique().to_list())}, schema={"value": pl.String})
