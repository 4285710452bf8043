"""Gold Python: top-N organisms of a specimen type by number of distinct specimens (ties by name)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    micro = tables["microbiologyevents"].filter(
        (concept_is("spec_type_desc", slots["specimen"]))
        & pl.col("org_name").is_not_null()
        & (pl.col("org_name") != "CANCELLED")
    )
    counts = micro.group_by("org_name").agg(pl.col("micro_specimen_id").n_unique().alias("specimens"))
    top = counts.sort(["specimens", "org_name"], descending=[True, False]).head(slots["n"])
    return top.select(pl.col("org_name").alias("value"))
