"""Gold Python: mean over ICU stays of each stay's mean value of a charted item (by label), rounded to 2 decimals."""

import polars as pl

from pipeline.templates.cohorts import charted_values, number_and_unit


def gold(tables, slots):
    values = charted_values(tables, slots["item_label"])
    if values.height == 0:
        return number_and_unit(None, None)
    per_stay = values.group_by("stay_id").agg(pl.col("valuenum").sort().mean().alias("stay_mean"))
    return number_and_unit(round(per_stay["stay_mean"].sort().mean(), 2), values["valueuom"].min())
