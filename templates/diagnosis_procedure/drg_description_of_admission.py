"""Gold Python: the DRG description (and code) of one admission for one DRG type."""

import polars as pl


def gold(tables, slots):
    drg = tables["drgcodes"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (pl.col("drg_type") == slots["drg_type"])
        & pl.col("description").is_not_null()
    )
    return drg.select(pl.col("description").alias("value"), "drg_code")
