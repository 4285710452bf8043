"""Small DuckDB helpers. DuckDB 2.0 refuses new work while a result is partly fetched: fetch fully."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Any:
    """The first column of the first row (None when there is no row); the result is fully consumed."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> tuple | None:
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def open_source(path: str | Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a source database; DuckDB's own progress bar stays off (ours show progress,
    and a worker process would otherwise print one bar per slow query into the log)."""
    con = duckdb.connect(str(path), read_only=True)
    con.execute("SET enable_progress_bar = false")  # a session option: it cannot go into connect's config
    if memory := os.environ.get("EHRGYM_DUCKDB_MEMORY"):
        con.execute("SET memory_limit = ?", [memory])
    return con


def database_path(con: duckdb.DuckDBPyConnection) -> str:
    """The file of the connection's current database."""
    return con.sql("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0]
