"""Gold Python: distinct patients with an eMAR administration event of a medication."""

import polars as pl

from pipeline.concepts import administered_expr, concept_is


def gold(tables, slots):
    given = (
        tables["emar"]
        .filter((concept_is("medication", slots["medication"])) & administered_expr("event_txt"))
        .collect()
    )
    if given.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    return pl.DataFrame({"value": [given["subject_id"].n_unique()]})
