"""Gold Python: percentage of interpreted tests of an organism against an antibiotic that read 'R'."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    tests = (
        tables["microbiologyevents"]
        .filter(
            (concept_is("org_name", slots["organism"]))
            & (concept_is("ab_name", slots["antibiotic"]))
            & pl.col("interpretation").is_not_null()
        )
        .collect()
    )
    if tests.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    resistant = tests.filter(pl.col("interpretation") == "R").height
    return pl.DataFrame({"value": [round(100.0 * resistant / tests.height, 2)]})
