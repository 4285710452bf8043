"""Noisy reference programs for abstain contracts: the gold program, guarded by a rule on the evidence rows.

The guard looks at the task's evidence rows (by key) in the overlay and abstains when the sub-type's rule
fires; otherwise the gold answer stands. SQL and polars each implement the rule, so the two reference
programs check each other on every pair.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import polars as pl

from pipeline.templates.instantiate import jsonable_rows
from pipeline.templates.render import sql_literal
from pipeline.templates.spec import Template

AbstainRule = Callable[[pl.DataFrame], bool]


NARROWING = 64  # a key column with at most this many distinct values also filters on its own (see `_key_match_sql`)


def _key_match_sql(keys: Sequence[dict[str, Any]]) -> str:
    """The rows with one of the keys; a key with a NULL part (a culture without an organism) matches null-safe.
    Each key column with few values, none NULL, also gets its own IN list: DuckDB evaluates a tuple IN list row by
    row over the whole table (32.8 M chart rows for a patient's 257 blood pressures at 10,000 patients, 1.7 s),
    while a column's IN list reaches the scan and skips the row groups without its values (0.02 s)."""
    columns = list(keys[0])
    narrowing = [
        f"{c} IN ({', '.join(values)})"
        for c in columns
        if None not in (found := {row[c] for row in keys})
        and len(values := sorted({sql_literal(v) for v in found})) <= NARROWING
    ]
    if any(row[c] is None for row in keys for c in columns):
        match = (
            "("
            + " OR ".join(
                "(" + " AND ".join(f"{c} IS NOT DISTINCT FROM {sql_literal(row[c])}" for c in columns) + ")"
                for row in keys
            )
            + ")"
        )
    else:
        tuples = ", ".join("(" + ", ".join(sql_literal(row[c]) for c in columns) + ")" for row in keys)
        match = f"({', '.join(columns)}) IN ({tuples})"
    return "(" + " AND ".join([*narrowing, match]) + ")"


def _iso(value: Any) -> Any:
    """Dates and datetimes as the ISO text tasks store, so that both forms can share a column."""
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return value.isoformat() if isinstance(value, dt.date) else value


class KeyRows(Sequence[dict[str, Any]]):
    """Key rows held as a frame: a population question's evidence is hundreds of thousands of keys at 1,000
    patients, millions at 10,000, and turning them into dicts and back cost a third of a pair's time there. A row
    becomes a dict (times as ISO text, as tasks store them) only where one is read; `keys_frame` takes the frame."""

    def __init__(self, frame: pl.DataFrame):
        self.frame = frame

    def __len__(self) -> int:
        return self.frame.height

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):  # as a list's slice is: dicts
            return jsonable_rows(self.frame[index])
        if not -self.frame.height <= index < self.frame.height:
            raise IndexError(index)
        return jsonable_rows(self.frame.slice(index % self.frame.height, 1))[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(jsonable_rows(self.frame))


def keys_frame(keys: Sequence[dict[str, Any]], schema: pl.Schema) -> pl.LazyFrame:
    """Key rows (datetimes as ISO text, as tasks store them, or as datetimes; or `KeyRows`) typed like the table's
    columns. Built column by column: a population question's evidence can hold hundreds of thousands of keys."""
    if isinstance(keys, KeyRows):
        return keys.frame.select(pl.col(name).cast(schema[name]) for name in keys.frame.columns).lazy()
    return pl.DataFrame([_key_column(name, [key[name] for key in keys], schema[name]) for name in keys[0]]).lazy()


def _key_column(name: str, values: list[Any], target: pl.DataType) -> pl.Series:
    if target.is_temporal() and any(isinstance(v, str) for v in values):
        text = pl.Series(name, [_iso(v) for v in values], dtype=pl.String)
        unit = target.time_unit if isinstance(target, pl.Datetime) else None
        parsed = text.str.to_date() if target == pl.Date else text.str.to_datetime(time_unit=unit)
        return parsed.cast(target)
    return pl.Series(name, values).cast(target)


def guarded_sql(gold_sql: str, table: str, keys: Sequence[dict[str, Any]], abstain_sql: str) -> str:
    """`abstain_sql` is a boolean SQL expression over the CTE `evidence` (the keyed rows of `table`)."""
    return (
        f"WITH evidence AS (SELECT * FROM {table} WHERE {_key_match_sql(keys)})\n"
        f"SELECT g.* FROM (\n{gold_sql.strip()}\n) g\nWHERE NOT ({abstain_sql})"
    )


def guarded_python(template: Template, gold, table: str, keys: Sequence[dict[str, Any]], abstain: AbstainRule):
    """A `reference(tables, slots)` that returns no answer when `abstain(evidence rows)` is true."""
    records, on = template.spec.answer.records, list(keys[0])

    def reference(tables, slots):
        frame = tables[table]
        evidence = frame.join(keys_frame(keys, frame.collect_schema()), on=on, how="semi", nulls_equal=True).collect()
        if abstain(evidence):
            return pl.DataFrame({c: [] for c in ["value", *records]})
        return gold(tables, slots)

    return reference
