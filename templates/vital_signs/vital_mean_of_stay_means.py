"""Gold Python: mean over ICU stays of each stay's mean value of a charted item (by label), rounded to 2 decimals."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = (
        tables["d_items"]
        .filter((concept_is("label", slots["item_label"])) & (pl.col("linksto") == "chartevents"))
        .select("itemid")
    )
    per_stay = (
        tables["chartevents"]
        .filter(pl.col("valuenum").is_not_null() & pl.col("stay_id").is_not_null())
        .join(items, on="itemid")
        .group_by("stay_id")
        .agg(pl.col("valuenum").sort().mean().alias("stay_mean"), pl.col("valueuom").min().alias("unit"))
        .collect()
    )
    if per_stay.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64, "unit": pl.String})
    return pl.DataFrame({"value": [round(per_stay["stay_mean"].sort().mean(), 2)], "unit": [per_stay["unit"].min()]})
