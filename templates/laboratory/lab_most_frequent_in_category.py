"""Gold Python: the n lab labels of a category with the most numeric results, a set (no tie at the n-th place, by
the sampler)."""

import polars as pl


def gold(tables, slots):
    items = tables["d_labitems"].filter(pl.col("category") == slots["category"]).select("itemid", "label")
    counts = (
        tables["labevents"]
        .filter(pl.col("valuenum").is_not_null())
        .select("itemid")
        .join(items, on="itemid")
        .group_by("label")
        .agg(pl.len().alias("results"))
        .sort(["results", "label"], descending=[True, False])
        .head(slots["n"])
    )
    return counts.select(pl.col("label").alias("value"), "results")
