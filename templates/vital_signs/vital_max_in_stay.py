"""Gold Python: the maximum numeric value of a charted item in one ICU stay; earliest time wins ties."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = tables["d_items"].filter(concept_is("label", slots["item_label"])).select("itemid")
    charted = tables["chartevents"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("stay_id") == slots["stay_id"])
        & pl.col("valuenum").is_not_null()
    )
    top = (
        charted.join(items, on="itemid")
        .sort(["valuenum", "charttime", "itemid"], descending=[True, False, False])
        .head(1)
    )
    return top.select(pl.col("valuenum").alias("value"), pl.col("valueuom").alias("unit"), "charttime", "itemid")
