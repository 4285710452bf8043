"""Gold Python: mean of the numeric values of a charted item (by label) in one ICU stay, rounded to 2 decimals."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = tables["d_items"].filter(concept_is("label", slots["item_label"])).select("itemid")
    charted = (
        tables["chartevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("stay_id") == slots["stay_id"])
            & pl.col("valuenum").is_not_null()
        )
        .join(items, on="itemid")
        .collect()
    )
    if charted.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64, "unit": pl.String})
    return pl.DataFrame({"value": [round(charted["valuenum"].sort().mean(), 2)], "unit": [charted["valueuom"].min()]})
