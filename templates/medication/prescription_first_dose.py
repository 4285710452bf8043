"""Gold Python: numeric dose and unit of the earliest prescription of a drug in one admission."""

import polars as pl

from pipeline.concepts import concept_is

NUMERIC = r"^[0-9]+(\.[0-9]+)?$"


def gold(tables, slots):
    rx = tables["prescriptions"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (concept_is("drug", slots["drug"]))
        & pl.col("starttime").is_not_null()
    )
    first = rx.sort(["starttime", "pharmacy_id"]).head(1).collect()
    if first.height == 0 or first["dose_val_rx"][0] is None:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    first = first.filter(pl.col("dose_val_rx").str.contains(NUMERIC))
    return first.select(
        pl.col("dose_val_rx").cast(pl.Float64).alias("value"),
        pl.col("dose_unit_rx").alias("unit"),
        "starttime",
        "pharmacy_id",
    )
