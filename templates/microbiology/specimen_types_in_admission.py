"""Gold Python: distinct specimen types of one admission's microbiology events."""

import polars as pl


def gold(tables, slots):
    micro = tables["microbiologyevents"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & pl.col("spec_type_desc").is_not_null()
    )
    return micro.select(pl.col("spec_type_desc").alias("value")).unique().sort("value")
