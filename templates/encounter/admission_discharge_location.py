"""Gold Python: the discharge location recorded for one hospital admission."""

import polars as pl


def gold(tables, slots):
    adm = tables["admissions"].filter(
        (pl.col("subject_id") == slots["subject_id"]) & (pl.col("hadm_id") == slots["hadm_id"])
    )
    return adm.filter(pl.col("discharge_location").is_not_null()).select(pl.col("discharge_location").alias("value"))
