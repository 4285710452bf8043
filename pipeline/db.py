"""Small DuckDB helpers. DuckDB 2.0 refuses new work while a result is partly fetched: fetch fully."""

from __future__ import annotations

from typing import Any

import duckdb


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Any:
    """The first column of the first row (None when there is no row); the result is fully consumed."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> tuple | None:
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None
