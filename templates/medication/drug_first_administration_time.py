"""Gold Python: earliest eMAR administration event of a medication in one admission (ties broken by emar_id)."""

import polars as pl

from pipeline.concepts import administered_expr, concept_is


def gold(tables, slots):
    given = tables["emar"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (concept_is("medication", slots["medication"]))
        & administered_expr("event_txt")
        & pl.col("charttime").is_not_null()
    )
    first = given.sort(["charttime", "emar_id"]).head(1)
    return first.select(pl.col("charttime").alias("value"), "emar_id")
