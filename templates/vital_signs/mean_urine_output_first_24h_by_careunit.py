"""Gold Python: mean over a care unit's ICU stays of the first-24-hour urine output (stays with any urine output)."""

import datetime as dt

import polars as pl

from pipeline.concepts import concept_is

URINE_ITEMS = [
    "Foley",
    "Void",
    "Condom Cath",
    "Straight Cath",
    "Suprapubic",
    "Ileoconduit",
    "R Nephrostomy",
    "L Nephrostomy",
    "R Ureteral Stent",
    "L Ureteral Stent",
    "OR Urine",
]


def gold(tables, slots):
    stays = (
        tables["icustays"]
        .filter(concept_is("first_careunit", slots["careunit"]))
        .select("subject_id", "stay_id", "intime")
    )
    items = (
        tables["d_items"]
        .filter((pl.col("linksto") == "outputevents") & pl.col("label").is_in(URINE_ITEMS))
        .select("itemid")
    )
    per_stay = (
        tables["outputevents"]
        .filter(pl.col("value").is_not_null())
        .join(items, on="itemid")
        .join(stays, on=["subject_id", "stay_id"])
        .filter(
            (pl.col("charttime") >= pl.col("intime"))
            & (pl.col("charttime") < pl.col("intime") + dt.timedelta(hours=24))
        )
        .group_by("stay_id")
        .agg(pl.col("value").sort().sum().alias("urine_ml"))  # summed in one order: the same float every run
        .collect()
    )
    if per_stay.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64})
    return pl.DataFrame({"value": [round(float(per_stay["urine_ml"].sort().mean()), 2)]})
