"""Gold Python: number of distinct admissions of one admission type."""

import polars as pl


def gold(tables, slots):
    adm = tables["admissions"].filter(pl.col("admission_type") == slots["admission_type"]).collect()
    return pl.DataFrame({"value": [len(set(adm["hadm_id"].drop_nulls().to_list()))]})
