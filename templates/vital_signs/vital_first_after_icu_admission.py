"""Gold Python: the earliest numeric value of a charted item (by label) at or after the ICU stay's intime."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    stay = (
        tables["icustays"]
        .filter((pl.col("subject_id") == slots["subject_id"]) & (pl.col("stay_id") == slots["stay_id"]))
        .select("subject_id", "stay_id", "intime")
    )
    items = tables["d_items"].filter(concept_is("label", slots["item_label"])).select("itemid")
    charted = (
        tables["chartevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("stay_id") == slots["stay_id"])
            & pl.col("valuenum").is_not_null()
        )
        .join(items, on="itemid")
        .join(stay, on=["subject_id", "stay_id"])
        .filter(pl.col("charttime") >= pl.col("intime"))
    )
    first = charted.sort(["charttime", "itemid", "valuenum"]).head(1)
    return first.select(pl.col("valuenum").alias("value"), pl.col("valueuom").alias("unit"), "charttime", "itemid")
