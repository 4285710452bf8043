"""Gold Python: total amount (mL) of an input item (by label) given in one ICU stay."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = (
        tables["d_items"]
        .filter((pl.col("linksto") == "inputevents") & (concept_is("label", slots["input_label"])))
        .select("itemid")
    )
    given = (
        tables["inputevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("stay_id") == slots["stay_id"])
            & pl.col("amount").is_not_null()
            & (pl.col("amountuom") == "ml")
        )
        .join(items, on="itemid")
        .collect()
    )
    if given.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64, "unit": pl.String})
    return pl.DataFrame({"value": [round(float(given["amount"].sort().sum()), 2)], "unit": [given["amountuom"].min()]})
