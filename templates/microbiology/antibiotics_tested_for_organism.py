"""Gold Python: distinct antibiotics tested against an organism."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    tests = tables["microbiologyevents"].filter(
        (concept_is("org_name", slots["organism"])) & pl.col("ab_name").is_not_null()
    )
    return tests.select(pl.col("ab_name").alias("value")).unique().sort("value")
