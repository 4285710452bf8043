"""Gold Python: distinct organisms (not NULL, not 'CANCELLED') grown in one admission's cultures."""

import polars as pl


def gold(tables, slots):
    micro = tables["microbiologyevents"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & pl.col("org_name").is_not_null()
        & (pl.col("org_name") != "CANCELLED")
    )
    return micro.select(pl.col("org_name").alias("value")).unique().sort("value")
