"""Gold Python: sum of urine output (outputevents, urine items by label) in the first 24 h of an ICU stay."""

import datetime as dt

import polars as pl

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
    stay = (
        tables["icustays"]
        .filter((pl.col("subject_id") == slots["subject_id"]) & (pl.col("stay_id") == slots["stay_id"]))
        .select("subject_id", "stay_id", "intime")
    )
    items = (
        tables["d_items"]
        .filter((pl.col("linksto") == "outputevents") & pl.col("label").is_in(URINE_ITEMS))
        .select("itemid")
    )
    urine = (
        tables["outputevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("stay_id") == slots["stay_id"])
            & pl.col("value").is_not_null()
        )
        .join(items, on="itemid")
        .join(stay, on=["subject_id", "stay_id"])
        .filter(
            (pl.col("charttime") >= pl.col("intime"))
            & (pl.col("charttime") < pl.col("intime") + dt.timedelta(hours=24))
        )
        .collect()
    )
    if urine.height == 0:
        return pl.DataFrame(schema={"value": pl.Float64, "unit": pl.String})
    return pl.DataFrame({"value": [round(float(urine["value"].sort().sum()), 2)], "unit": [urine["valueuom"].min()]})
