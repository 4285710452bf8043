"""Gold Python: the services of one admission ordered by transfer time (ties by service name)."""

import polars as pl


def gold(tables, slots):
    rows = tables["services"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & pl.col("curr_service").is_not_null()
        & pl.col("transfertime").is_not_null()
    )
    return rows.sort(["transfertime", "curr_service"]).select(pl.col("curr_service").alias("value"), "transfertime")
