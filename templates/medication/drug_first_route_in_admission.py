"""Gold Python: the route of the earliest prescription (by starttime, then pharmacy_id) of a drug in one admission."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    rx = tables["prescriptions"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (concept_is("drug", slots["drug"]))
        & pl.col("starttime").is_not_null()
    )
    first = rx.sort(["starttime", "pharmacy_id"]).head(1).filter(pl.col("route").is_not_null())
    return first.select(pl.col("route").alias("value"), "starttime", "pharmacy_id")
