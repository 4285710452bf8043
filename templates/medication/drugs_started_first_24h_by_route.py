"""Gold Python: distinct drugs of a route whose prescriptions start within 24 h of the admission time."""

import polars as pl


def gold(tables, slots):
    adm = (
        tables["admissions"]
        .filter((pl.col("hadm_id") == slots["hadm_id"]) & (pl.col("subject_id") == slots["subject_id"]))
        .select("hadm_id", "subject_id", "admittime")
    )
    rx = tables["prescriptions"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (pl.col("route") == slots["route"])
        & pl.col("drug").is_not_null()
    )
    early = rx.join(adm, on=["hadm_id", "subject_id"]).filter(
        (pl.col("starttime") >= pl.col("admittime"))
        & (pl.col("starttime") < pl.col("admittime") + pl.duration(hours=24))
    )
    return early.select(pl.col("drug").alias("value")).unique().sort("value")
