"""Gold Python: percentage of a drug's prescriptions (with a route) that use a given route."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    rx = tables["prescriptions"].filter((concept_is("drug", slots["drug"])) & pl.col("route").is_not_null()).collect()
    if rx.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    hits = rx.filter(pl.col("route") == slots["route"]).height
    return pl.DataFrame({"value": [round(100.0 * hits / rx.height, 2)]})
