"""Gold Python: the mean over patients of each patient's highest numeric result of a lab (label + fluid)."""

import polars as pl

from pipeline.templates.cohorts import lab_results, number_and_unit


def gold(tables, slots):
    values = lab_results(tables, slots["lab_label"], slots["fluid"])
    if values.height == 0:
        return number_and_unit(None, None)
    peaks = values.group_by("subject_id").agg(pl.col("valuenum").max().alias("peak"))
    return number_and_unit(round(peaks["peak"].sort().mean(), 2), values["valueuom"].min())
