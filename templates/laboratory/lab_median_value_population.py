"""Gold Python: median of every numeric result of a lab (label + fluid) in the database, rounded to 2 decimals."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = (
        tables["d_labitems"]
        .filter((concept_is("label", slots["lab_label"])) & (pl.col("fluid") == slots["fluid"]))
        .select("itemid")
    )
    values = tables["labevents"].filter(pl.col("valuenum").is_not_null()).join(items, on="itemid").collect()
    if values.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64, "unit": pl.String})
    return pl.DataFrame({"value": [round(values["valuenum"].median(), 2)], "unit": [values["valueuom"].min()]})
