"""Gold Python: the three discharge locations with the most distinct admissions of one type (ties by name)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    adm = (
        tables["admissions"]
        .filter((concept_is("admission_type", slots["admission_type"])) & pl.col("discharge_location").is_not_null())
        .collect()
    )
    by_location = {}
    for row in adm.iter_rows(named=True):
        by_location.setdefault(row["discharge_location"], set()).add(row["hadm_id"])
    ranked = sorted(by_location.items(), key=lambda item: (-len(item[1]), item[0].encode()))[:3]
    return pl.DataFrame(
        {"value": [loc for loc, _ in ranked], "n": [len(h) for _, h in ranked]},
        schema={"value": pl.String, "n": pl.Int64},
    )
