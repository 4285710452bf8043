"""The rows a clean task rests on: its evidence keys, and every candidate row of the question's filter."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb
import sqlglot

from pipeline.noise.base import Rejected
from pipeline.templates.instantiate import CleanTask, typed_slots
from pipeline.templates.render import render_sql
from pipeline.templates.spec import Template


def evidence_table(task: CleanTask) -> tuple[str, list[str], list[dict[str, Any]]]:
    """(table, key columns, key rows) of the task's evidence; all evidence must sit in one table."""
    tables = {row["table_name"] for row in task.evidence}
    if len(tables) != 1:
        raise Rejected("evidence_spans_tables")
    keys = [c for c in task.evidence[0] if c != "table_name"]
    return tables.pop(), keys, [{c: row[c] for c in keys} for row in task.evidence]


def candidate_keys(con: duckdb.DuckDBPyConnection, task: CleanTask, template: Template) -> list[dict[str, Any]]:
    """Evidence query without ORDER BY / LIMIT: every row the question's filter admits, not just the answer's."""
    tree = sqlglot.parse_one(render_sql(template.evidence_sql, typed_slots(template, task.slots)), dialect="duckdb")
    tree.set("limit", None)
    tree.set("order", None)
    rows = con.sql(f"SELECT * FROM ({tree.sql(dialect='duckdb')}) ORDER BY ALL").pl().to_dicts()  # scan order is not stable
    return [{c: v for c, v in row.items() if c != "table_name"} for row in rows]


@contextmanager
def keyed_rows(con: duckdb.DuckDBPyConnection, table: str, keys: list[dict[str, Any]]) -> Iterator[Callable[..., str]]:
    """Yields `rows(relation=table)`: SQL for the rows of a relation with the given keys. It is a semi-join with
    a registered key frame (typed like the table), not a long IN list: DuckDB pushes the join's key range into
    the scan, and the cost does not grow with the text it has to parse."""
    from pipeline.noise.guards import keys_frame  # the polars typing of ISO-text keys

    columns = list(keys[0])
    schema = con.sql(f"SELECT {', '.join(columns)} FROM {table} LIMIT 0").pl().schema
    con.register("__evidence_keys", keys_frame(keys, schema).collect())
    on = " AND ".join(f"t.{c} = k.{c}" for c in columns)
    try:
        yield lambda relation=table: f"SELECT t.* FROM {relation} t SEMI JOIN __evidence_keys k ON {on}"
    finally:
        con.unregister("__evidence_keys")


def rows_by_key(con: duckdb.DuckDBPyConnection, table: str, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Full source rows for the given key rows, sorted."""
    if not keys:
        return []
    with keyed_rows(con, table, keys) as rows:
        return con.sql(f"{rows()} ORDER BY ALL").pl().to_dicts()
