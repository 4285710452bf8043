"""Gold Python: the latest numeric result of a lab (by label) inside a window of whole days; ties by labevent_id."""

import datetime as dt

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    start = dt.datetime.combine(slots["window_start"], dt.time())
    stop = dt.datetime.combine(slots["window_end"], dt.time()) + dt.timedelta(days=1)
    items = tables["d_labitems"].filter(concept_is("label", slots["lab_label"])).select("itemid")
    events = tables["labevents"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & pl.col("valuenum").is_not_null()
        & (pl.col("charttime") >= start)
        & (pl.col("charttime") < stop)
    )
    latest = events.join(items, on="itemid").sort(["charttime", "labevent_id"], descending=True).head(1)
    return latest.select(pl.col("valuenum").alias("value"), pl.col("valueuom").alias("unit"), "charttime", "itemid")
