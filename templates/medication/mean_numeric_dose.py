"""Gold Python: mean plain-numeric dose of a drug over its prescriptions in one dose unit."""

import polars as pl

from pipeline.concepts import concept_is

NUMERIC = r"^[0-9]+(\.[0-9]+)?$"


def gold(tables, slots):
    rx = (
        tables["prescriptions"]
        .filter(
            (concept_is("drug", slots["drug"]))
            & (pl.col("dose_unit_rx") == slots["dose_unit"])
            & pl.col("dose_val_rx").fill_null("").str.contains(NUMERIC)
        )
        .collect()
    )
    if rx.height == 0:
        return pl.DataFrame({"value": [], "unit": []}, schema={"value": pl.Float64, "unit": pl.String})
    mean = rx["dose_val_rx"].cast(pl.Float64).sort().mean()
    return pl.DataFrame({"value": [round(mean, 2)], "unit": [slots["dose_unit"]]})
