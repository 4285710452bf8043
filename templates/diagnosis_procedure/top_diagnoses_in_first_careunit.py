"""Gold Python: the three diagnosis titles with the most distinct admissions among admissions with an ICU
stay starting in one care unit; ties broken by title."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    cohort = (
        tables["icustays"]
        .filter((concept_is("first_careunit", slots["first_careunit"])) & pl.col("hadm_id").is_not_null())
        .select("hadm_id")
        .unique()
    )
    titled = (
        tables["diagnoses_icd"]
        .join(cohort, on="hadm_id", how="semi")
        .join(tables["d_icd_diagnoses"], on=["icd_code", "icd_version"], how="inner")
        .filter(pl.col("long_title").is_not_null())
    )
    counts = titled.group_by("long_title").agg(pl.col("hadm_id").n_unique().alias("n"))
    top = counts.sort(["n", "long_title"], descending=[True, False]).head(3)
    return top.select(pl.col("long_title").alias("value"), "n")
