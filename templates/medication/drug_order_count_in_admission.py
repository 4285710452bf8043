"""Gold Python: distinct prescription orders (pharmacy_id) of a drug in one admission."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    orders = (
        tables["prescriptions"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & (concept_is("drug", slots["drug"]))
        )
        .collect()
    )
    if orders.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    return pl.DataFrame({"value": [orders["pharmacy_id"].n_unique()]})
