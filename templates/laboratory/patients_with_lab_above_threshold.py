"""Gold Python: distinct patients with any result of a lab (by label, in the given unit) above a threshold."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = tables["d_labitems"].filter(concept_is("label", slots["lab_label"])).select("itemid").collect()
    if items.height == 0:
        return pl.DataFrame(schema={"value": pl.Int64})
    above = (
        tables["labevents"]
        .filter(
            (pl.col("valueuom") == slots["unit"])
            & pl.col("valuenum").is_not_null()
            & (pl.col("valuenum") > slots["threshold"])
        )
        .join(items.lazy(), on="itemid")
    )
    return above.select(pl.col("subject_id").n_unique().alias("value"))
