"""Gold Python: last minus first numeric result of a lab (by label) in one admission, rounded to 2 decimals."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    items = tables["d_labitems"].filter(concept_is("label", slots["lab_label"])).select("itemid")
    results = (
        tables["labevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("valuenum").is_not_null()
            & pl.col("charttime").is_not_null()
        )
        .join(items, on="itemid")
        .sort(["charttime", "labevent_id"])
        .collect()
    )
    empty = pl.DataFrame(
        schema={"value": pl.Float64, "unit": pl.String, "first_charttime": pl.Datetime, "last_charttime": pl.Datetime}
    )
    if results.height < 2:
        return empty
    first, last = results.row(0, named=True), results.row(results.height - 1, named=True)
    return pl.DataFrame(
        {
            "value": [round(last["valuenum"] - first["valuenum"], 2)],
            "unit": [last["valueuom"]],
            "first_charttime": [first["charttime"]],
            "last_charttime": [last["charttime"]],
        }
    )
