"""Gold Python: distinct ICU stays with any charted value of an item (by label, in the given unit) below a threshold."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = (
        tables["d_items"]
        .filter((concept_is("label", slots["item_label"])) & (pl.col("linksto") == "chartevents"))
        .select("itemid")
        .collect()
    )
    if items.height == 0:
        return pl.DataFrame(schema={"value": pl.Int64})
    hits = (
        tables["chartevents"]
        .filter(
            (pl.col("valueuom") == slots["unit"])
            & pl.col("valuenum").is_not_null()
            & pl.col("stay_id").is_not_null()
            & (pl.col("valuenum") < slots["threshold"])
        )
        .join(items.lazy(), on="itemid")
    )
    return hits.select(pl.col("stay_id").n_unique().alias("value"))
