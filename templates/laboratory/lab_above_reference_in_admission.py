"""Gold Python: whether any numeric result of a lab (by label) in one admission exceeds its own upper reference
limit."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = tables["d_labitems"].filter(concept_is("label", slots["lab_label"])).select("itemid")
    compared = (
        tables["labevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("valuenum").is_not_null()
            & pl.col("ref_range_upper").is_not_null()
        )
        .join(items, on="itemid")
        .collect()
    )
    if compared.height == 0:
        return pl.DataFrame(schema={"value": pl.Boolean})
    above = (compared["valuenum"] > compared["ref_range_upper"]).any()
    return pl.DataFrame({"value": [bool(above)]})
