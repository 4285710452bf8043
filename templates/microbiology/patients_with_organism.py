"""Gold Python: distinct patients with a given organism in a given specimen type."""

import polars as pl


def gold(tables, slots):
    hits = tables["microbiologyevents"].filter(
        (pl.col("org_name") == slots["organism"]) & (pl.col("spec_type_desc") == slots["specimen"])
    )
    return hits.select(pl.col("subject_id").n_unique().alias("value"))
