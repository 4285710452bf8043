"""Gold Python: did any interpreted test of an organism against an antibiotic in one admission read 'R'?"""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    tests = (
        tables["microbiologyevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & (concept_is("org_name", slots["organism"]))
            & (concept_is("ab_name", slots["antibiotic"]))
            & pl.col("interpretation").is_not_null()
        )
        .collect()
    )
    if tests.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Boolean})
    return pl.DataFrame({"value": ["R" in tests["interpretation"].to_list()]})
