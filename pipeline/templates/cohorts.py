"""Row sets several population templates' gold Python programs share: a lab's numeric results, an item's charted
numeric values in ICU stays."""

from __future__ import annotations

import polars as pl

from pipeline.concepts import concept_is


def lab_results(tables, lab_label: str, fluid: str) -> pl.DataFrame:
    """Every labevents row with a number of the lab named `lab_label` (by concept) measured in `fluid`."""
    items = tables["d_labitems"].filter(concept_is("label", lab_label) & (pl.col("fluid") == fluid))
    return tables["labevents"].filter(pl.col("valuenum").is_not_null() & _among(items)).collect()


def charted_values(tables, item_label: str) -> pl.DataFrame:
    """Every chartevents row with a number and an ICU stay of the item named `item_label` (by concept)."""
    items = tables["d_items"].filter(concept_is("label", item_label) & (pl.col("linksto") == "chartevents"))
    return (
        tables["chartevents"]
        .filter(_among(items) & pl.col("valuenum").is_not_null() & pl.col("stay_id").is_not_null())
        .collect()
    )


def _among(items: pl.LazyFrame) -> pl.Expr:
    """Rows of the dictionary's `items` (their ids read first: a filter on a list reaches the Parquet scan, a join
    does not), in the event table's own order."""
    return pl.col("itemid").is_in(items.select("itemid").collect()["itemid"].implode())


def number_and_unit(value: float | None, unit: str | None) -> pl.DataFrame:
    """A one-row answer of a number and its unit (no row when there is no number)."""
    if value is None:
        return pl.DataFrame(schema={"value": pl.Float64, "unit": pl.String})
    return pl.DataFrame({"value": [value], "unit": [unit]})
