"""Gold Python: percentage of numeric results of a lab (label + fluid) flagged 'abnormal', rounded to 2 decimals."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = (
        tables["d_labitems"]
        .filter((concept_is("label", slots["lab_label"])) & (pl.col("fluid") == slots["fluid"]))
        .select("itemid")
    )
    results = tables["labevents"].filter(pl.col("valuenum").is_not_null()).join(items, on="itemid").collect()
    if results.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64})
    abnormal = results.filter(pl.col("flag") == "abnormal").height
    return pl.DataFrame({"value": [round(100.0 * abnormal / results.height, 2)]})
