"""Gold Python: chart time of the earliest positive culture of a specimen type in one admission."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    micro = tables["microbiologyevents"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (concept_is("spec_type_desc", slots["specimen"]))
        & pl.col("org_name").is_not_null()
        & (pl.col("org_name") != "CANCELLED")
        & pl.col("charttime").is_not_null()
    )
    first = micro.sort(["charttime", "microevent_id"]).head(1)
    return first.select(pl.col("charttime").alias("value"), "micro_specimen_id")
