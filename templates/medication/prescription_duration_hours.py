"""Gold Python: hours between start and stop of the earliest prescription of a drug in one admission."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    rx = tables["prescriptions"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (concept_is("drug", slots["drug"]))
        & pl.col("starttime").is_not_null()
    )
    first = rx.sort(["starttime", "pharmacy_id"]).head(1).filter(pl.col("stoptime").is_not_null())
    hours = (pl.col("stoptime") - pl.col("starttime")).dt.total_seconds() / 3600.0
    return first.select(hours.round(2).alias("value"), "starttime", "pharmacy_id")
