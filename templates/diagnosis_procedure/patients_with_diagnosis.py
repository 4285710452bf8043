"""Gold Python: number of distinct patients with a diagnosis whose ICD title matches exactly."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    codes = tables["d_icd_diagnoses"].filter(concept_is("long_title", slots["diagnosis_title"]))
    hits = tables["diagnoses_icd"].join(codes, on=["icd_code", "icd_version"])
    return hits.select(pl.col("subject_id").n_unique().alias("value"))
