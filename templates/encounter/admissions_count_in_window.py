"""Gold Python: distinct admissions whose admittime falls inside a window of whole days (0 when none does)."""

import datetime as dt

import polars as pl


def gold(tables, slots):
    start = dt.datetime.combine(slots["window_start"], dt.time())
    stop = dt.datetime.combine(slots["window_end"], dt.time()) + dt.timedelta(days=1)
    inside = tables["admissions"].filter((pl.col("admittime") >= start) & (pl.col("admittime") < stop))
    return inside.select(pl.col("hadm_id").n_unique().cast(pl.Int64).alias("value")).collect()
