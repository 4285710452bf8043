"""Gold Python: total hours of the ICU stays of one admission (two decimals)."""

import polars as pl


def gold(tables, slots):
    stays = (
        tables["icustays"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("intime").is_not_null()
            & pl.col("outtime").is_not_null()
        )
        .collect()
    )
    if stays.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    hours = (stays["outtime"] - stays["intime"]).dt.total_seconds().sum() / 3600.0
    return pl.DataFrame({"value": [round(hours, 2)]})
