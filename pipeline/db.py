"""Small DuckDB helpers. DuckDB 2.0 refuses new work while a result is partly fetched: fetch fully."""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable
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
    if threads := os.environ.get("EHRGYM_DUCKDB_THREADS"):
        con.execute("SET threads = ?", [int(threads)])
    return con


def database_path(con: duckdb.DuckDBPyConnection) -> str:
    """The file of the connection's current database."""
    return con.sql("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0]


_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> (file identity, catalog)
_FACTS: dict[tuple, Any] = {}
_MEMORY = itertools.count()


def source_fact(con: duckdb.DuckDBPyConnection, key: tuple, compute: Callable[[str], Any]) -> Any:
    """A fact of the read-only source database (an item's precision, a dictionary's labels), computed once per
    database file (path, size, mtime) and `key`, for every connection and every process step that asks.
    `compute(source)` gets the qualified prefix of the source's tables (`"catalog".main.`), so that it reads the
    source, never an overlay's views of the same names."""
    if con not in _SOURCES:
        catalog, path = con.execute(
            "SELECT database_name, coalesce(path, '') FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchall()[0]
        stat = os.stat(path) if path and os.path.isfile(path) else None
        file = (path, stat.st_size, stat.st_mtime_ns) if stat else ("memory", next(_MEMORY))  # none shared
        _SOURCES[con] = (file, catalog)
    identity, catalog = _SOURCES[con]
    found = _FACTS.get((identity, *key), _FACTS)
    if found is _FACTS:
        found = _FACTS[(identity, *key)] = compute(f'"{catalog}".main.')
    return found
