"""Gold Python: distinct patients with a given organism in a given specimen type."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    hits = tables["microbiologyevents"].filter(
        (concept_is("org_name", slots["organism"])) & (concept_is("spec_type_desc", slots["specimen"]))
    )
    return hits.select(pl.col("subject_id").n_unique().alias("value"))
