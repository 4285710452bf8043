"""Gold Python: the first care unit of one ICU stay, with the stay's intime."""

import polars as pl


def gold(tables, slots):
    stay = tables["icustays"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("stay_id") == slots["stay_id"])
        & pl.col("first_careunit").is_not_null()
    )
    return stay.select(pl.col("first_careunit").alias("value"), pl.col("intime"))
