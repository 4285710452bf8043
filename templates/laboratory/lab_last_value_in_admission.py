"""Gold Python: the latest numeric result of a lab (by label) in one admission; ties broken by labevent_id."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = tables["d_labitems"].filter(concept_is("label", slots["lab_label"])).select("itemid")
    events = tables["labevents"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & pl.col("valuenum").is_not_null()
        & pl.col("charttime").is_not_null()
    )
    latest = events.join(items, on="itemid").sort(["charttime", "labevent_id"], descending=True).head(1)
    return latest.select(pl.col("valuenum").alias("value"), pl.col("valueuom").alias("unit"), "charttime", "itemid")
