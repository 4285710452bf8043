"""Gold Python: mean ICU stay length in days over the distinct stays starting in one care unit (two decimals)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    stays = (
        tables["icustays"]
        .filter(
            (concept_is("first_careunit", slots["first_careunit"]))
            & pl.col("intime").is_not_null()
            & pl.col("outtime").is_not_null()
        )
        .collect()
    )
    per_stay = {}
    for row in stays.iter_rows(named=True):
        days = (row["outtime"] - row["intime"]).total_seconds() / 86400.0
        per_stay[row["stay_id"]] = min(days, per_stay.get(row["stay_id"], days))
    if not per_stay:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    return pl.DataFrame({"value": [round(sum(per_stay.values()) / len(per_stay), 2)]})
