"""Gold Python: the earliest start of an ICU procedure item (by label) in one ICU stay (ties broken by orderid)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = tables["d_items"].filter(concept_is("label", slots["procedure_label"])).select("itemid")
    done = tables["procedureevents"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("stay_id") == slots["stay_id"])
        & pl.col("starttime").is_not_null()
    )
    first = done.join(items, on="itemid", how="semi").sort(["starttime", "orderid"]).head(1)
    return first.select(pl.col("starttime").alias("value"), "orderid")
