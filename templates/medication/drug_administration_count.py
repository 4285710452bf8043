"""Gold Python: number of distinct eMAR administration events of a medication in one admission."""

import polars as pl

from pipeline.concepts import administered_expr, concept_is


def gold(tables, slots):
    given = (
        tables["emar"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & (concept_is("medication", slots["medication"]))
            & administered_expr("event_txt")
        )
        .collect()
    )
    if given.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    return pl.DataFrame({"value": [given["emar_id"].n_unique()]})
