"""Gold Python: the n input items (by label) of a category given in the most distinct ICU stays (no tie at the n-th
place, by the sampler)."""

import polars as pl


def gold(tables, slots):
    items = (
        tables["d_items"]
        .filter((pl.col("category") == slots["category"]) & (pl.col("linksto") == "inputevents"))
        .select("itemid", "label")
    )
    ranked = (
        tables["inputevents"]
        .filter(pl.col("stay_id").is_not_null())
        .join(items, on="itemid")
        .group_by("label")
        .agg(pl.col("stay_id").n_unique().alias("stays"))
        .sort(["stays", "label"], descending=[True, False])
        .head(slots["n"])
    )
    return ranked.select(pl.col("label").alias("value"), "stays")
