"""Gold Python: top-N drugs of a route by number of distinct prescriptions (ties by drug name)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    rx = tables["prescriptions"].filter((concept_is("route", slots["route"])) & pl.col("drug").is_not_null())
    counts = rx.group_by("drug").agg(pl.col("pharmacy_id").n_unique().alias("orders"))
    top = counts.sort(["orders", "drug"], descending=[True, False]).head(slots["n"])
    return top.select(pl.col("drug").alias("value"))
