"""Gold Python: number of distinct eMAR 'Administered' events of a medication in one admission."""

import polars as pl


def gold(tables, slots):
    given = tables["emar"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (pl.col("medication") == slots["medication"])
        & (pl.col("event_txt") == "Administered")
    ).collect()
    if given.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    return pl.DataFrame({"value": [given["emar_id"].n_unique()]})
