"""Gold Python: percentage of numeric results of a lab (label + fluid) flagged 'abnormal', rounded to 2 decimals."""

import polars as pl

from pipeline.templates.cohorts import lab_results


def gold(tables, slots):
    results = lab_results(tables, slots["lab_label"], slots["fluid"])
    if results.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64})
    abnormal = results.filter(pl.col("flag") == "abnormal").height
    return pl.DataFrame({"value": [round(100.0 * abnormal / results.height, 2)]})
