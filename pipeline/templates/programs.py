"""Run a template's gold SQL (DuckDB) and gold Python (polars) on one database connection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipeline.templates.render import render_sql
from pipeline.templates.spec import Template


class Tables:
    """The database's tables as polars frames for gold Python programs, each read once and cached.

    Works on any DuckDB connection, so the same program runs on a source or on a noisy overlay.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con = con
        self._frames: dict[str, pl.DataFrame] = {}

    def replaced(self, frames: dict[str, pl.DataFrame]) -> Tables:
        """The same tables with some frames replaced (a noisy overlay built in polars); the rest are shared."""
        view = Tables(self._con)
        view._frames = {**self._frames, **frames}
        return view

    def __getitem__(self, name: str) -> pl.LazyFrame:
        if name not in self._frames:
            self._frames[name] = self._con.sql(f"SELECT * FROM {_identifier(name)}").pl()
        return self._frames[name].lazy()


def _identifier(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"not a table name: {name!r}")
    return name


def run_sql(con: duckdb.DuckDBPyConnection, template_sql: str, slots: dict[str, Any]) -> pl.DataFrame:
    """Render the SQL template with the slots and execute it."""
    return con.sql(render_sql(template_sql, slots)).pl()


def load_python_program(template: Template):
    """The `gold(tables, slots) -> polars.DataFrame` function defined in the template's `.py` file."""
    namespace: dict[str, Any] = {"__name__": f"ehrgym_template_{template.id}"}
    source_path = Path(template.path).with_suffix(".py")
    exec(compile(template.gold_python, str(source_path), "exec"), namespace)  # trusted: our own template files
    gold = namespace.get("gold")
    if not callable(gold):
        raise ValueError(f"{source_path}: must define a function gold(tables, slots) -> polars.DataFrame")
    return gold


def run_python(template: Template, tables: Tables, slots: dict[str, Any]) -> pl.DataFrame:
    result = load_python_program(template)(tables, dict(slots))
    if isinstance(result, pl.LazyFrame):
        result = result.collect()
    if not isinstance(result, pl.DataFrame):
        raise TypeError(f"{template.path}: gold() returned {type(result).__name__}, expected a polars DataFrame")
    return result
