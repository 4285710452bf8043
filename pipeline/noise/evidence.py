"""The rows a clean task rests on: its evidence keys, and every candidate row of the question's filter."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb
import polars as pl
import sqlglot

from pipeline.noise.base import Rejected
from pipeline.noise.guards import KeyRows, keys_frame
from pipeline.noise.measurements import measurement_tables, plausible_ranges, ranges_relation
from pipeline.templates.instantiate import CleanTask, typed_slots
from pipeline.templates.render import render_sql
from pipeline.templates.spec import Template


def task_evidence(con: duckdb.DuckDBPyConnection, task: CleanTask) -> Sequence[dict[str, Any]]:
    """Every evidence row of the task: those it carries, or (when it carries only the first ones) its evidence
    query run again on the source `con`, sorted as at instantiation (held as a frame: `KeyRows`)."""
    if task.evidence_rows is None or task.evidence_rows == len(task.evidence):
        return task.evidence
    return KeyRows(con.sql(f"SELECT * FROM ({task.evidence_sql}) ORDER BY ALL").pl())


def evidence_table(con: duckdb.DuckDBPyConnection, task: CleanTask) -> tuple[str, list[str], Sequence[dict[str, Any]]]:
    """(table, key columns, key rows) of the task's evidence; all evidence must sit in one table."""
    evidence = task_evidence(con, task)
    if isinstance(evidence, KeyRows):
        tables, keys = set(evidence.frame["table_name"].unique()), evidence.frame.columns
    else:
        tables, keys = {row["table_name"] for row in evidence}, list(evidence[0])
    if len(tables) != 1:
        raise Rejected("evidence_spans_tables")
    keys = [c for c in keys if c != "table_name"]
    if isinstance(evidence, KeyRows):
        return tables.pop(), keys, KeyRows(evidence.frame.select(keys))
    return tables.pop(), keys, [{c: row[c] for c in keys} for row in evidence]


def as_a_set(sql: str) -> str:
    """The query without its ORDER BY where the order picks no rows (no LIMIT, OFFSET or DISTINCT ON): the same
    rows, unsorted, for a check that reads them as a set (13.9 M heart-rate evidence rows at 100,000 patients took
    3 s sorted, 1.2 s not)."""
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    distinct = tree.args.get("distinct")
    if (
        not tree.args.get("order")
        or tree.args.get("limit")
        or tree.args.get("offset")
        or (distinct and distinct.args.get("on"))
    ):
        return sql
    tree.set("order", None)
    return tree.sql(dialect="duckdb")


def candidate_keys(
    con: duckdb.DuckDBPyConnection, task: CleanTask, template: Template, at_most: int | None = None
) -> list[dict[str, Any]]:
    """Evidence query without ORDER BY / LIMIT: every row the question's filter admits, not just the answer's.
    With `at_most`, at most that many + 1 rows come back (enough to tell that there are too many)."""
    tree = sqlglot.parse_one(render_sql(template.evidence_sql, typed_slots(template, task.slots)), dialect="duckdb")
    tree.set("limit", None)
    tree.set("order", None)
    limit = "" if at_most is None else f" LIMIT {int(at_most) + 1}"
    rows = con.sql(f"SELECT * FROM ({tree.sql(dialect='duckdb')}) ORDER BY ALL{limit}").pl()  # scan order is not stable
    return rows.drop("table_name", strict=False).to_dicts()


@contextmanager
def keyed_rows(
    con: duckdb.DuckDBPyConnection, table: str, keys: Sequence[dict[str, Any]]
) -> Iterator[Callable[..., str]]:
    """Yields `rows(relation=table)`: SQL for the rows of a relation with the given keys. It is a semi-join with
    a registered key frame (typed like the table), not a long IN list: DuckDB pushes the join's key range into
    the scan, and the cost does not grow with the text it has to parse."""
    columns = list(keys[0])
    schema = con.sql(f"SELECT {', '.join(columns)} FROM {table} LIMIT 0").pl().schema
    con.register("__evidence_keys", keys_frame(keys, schema).collect())
    on = " AND ".join(f"t.{c} = k.{c}" for c in columns)
    try:
        yield lambda relation=table: f"SELECT t.* FROM {relation} t SEMI JOIN __evidence_keys k ON {on}"
    finally:
        con.unregister("__evidence_keys")


def rows_by_key(con: duckdb.DuckDBPyConnection, table: str, keys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Full source rows for the given key rows, sorted."""
    return frame_by_key(con, table, keys).to_dicts() if keys else []


def frame_by_key(con: duckdb.DuckDBPyConnection, table: str, keys: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """Full source rows for the given (non-empty) key rows, sorted, as a frame (a population question's evidence
    can be a large slice of a table: rows become Python dicts only where a few are picked)."""
    with keyed_rows(con, table, keys) as rows:
        return con.sql(f"{rows()} ORDER BY ALL").pl()


def impossible_on_source(con, table: str, keys: list[dict]) -> bool:
    """Some of these rows of a measurement table already hold an impossible number in the clean source (blind
    audit 20: three Celsius temperatures charted 97.2-99.0, Fahrenheit numbers): a careful analyst would mend
    them too, so the gold answer read as it stands is no answer to score against."""
    if not keys:
        return False
    with keyed_rows(con, table, keys) as rows:
        return _impossible_rows(con, table, rows())


def impossible_among(con, table: str, keys_sql: str, columns: list[str]) -> bool:
    """`impossible_on_source` for the rows whose key `columns` a query returns (a task's evidence query: its keys
    never leave DuckDB)."""
    on = " AND ".join(f"t.{c} = k.{c}" for c in columns)
    return _impossible_rows(con, table, f"SELECT t.* FROM {table} t SEMI JOIN ({keys_sql}) k ON {on}")


def _impossible_rows(con, table: str, rows_sql: str) -> bool:
    facts, ranges = measurement_tables().get(table), plausible_ranges().get(table)
    if facts is None or not ranges:
        return False
    number = f"x.{facts.number}"
    found = con.sql(
        f"SELECT 1 FROM ({rows_sql}) x JOIN {ranges_relation(ranges)} ON x.{facts.item} = r.item "
        f"WHERE {number} < r.low OR {number} > r.high LIMIT 1"
    )
    return bool(found.fetchall())
