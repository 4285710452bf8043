"""Gold Python: the earliest numeric result of a lab (by label) in the first 24 h after admittime; ties by
labevent_id."""

import datetime as dt

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    admission = (
        tables["admissions"]
        .filter((pl.col("subject_id") == slots["subject_id"]) & (pl.col("hadm_id") == slots["hadm_id"]))
        .select("subject_id", "hadm_id", "admittime")
    )
    items = tables["d_labitems"].filter(concept_is("label", slots["lab_label"])).select("itemid")
    events = (
        tables["labevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("valuenum").is_not_null()
        )
        .join(items, on="itemid")
        .join(admission, on=["subject_id", "hadm_id"])
        .filter(
            (pl.col("charttime") >= pl.col("admittime"))
            & (pl.col("charttime") < pl.col("admittime") + dt.timedelta(hours=24))
        )
    )
    first = events.sort(["charttime", "labevent_id"]).head(1)
    return first.select(pl.col("valuenum").alias("value"), pl.col("valueuom").alias("unit"), "charttime", "itemid")
