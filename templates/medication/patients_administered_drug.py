"""Gold Python: distinct patients with an eMAR 'Administered' event of a medication."""

import polars as pl


def gold(tables, slots):
    given = tables["emar"].filter(
        (pl.col("medication") == slots["medication"]) & (pl.col("event_txt") == "Administered")
    ).collect()
    if given.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    return pl.DataFrame({"value": [given["subject_id"].n_unique()]})
