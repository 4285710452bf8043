"""Run a template's gold SQL (DuckDB) and gold Python (polars) on one database connection."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipeline.source.schema import load_schema
from pipeline.source.snapshot import table_file
from pipeline.templates.render import render_sql
from pipeline.templates.spec import Template


class Tables:
    """The source's tables as polars frames for gold Python programs.

    Always read from the source catalog by its qualified name (or its snapshot), so an active SQL overlay is never
    seen (the Python side gets its noisy data from `replaced`, an independent polars overlay). `for_subject` gives
    a view whose patient tables hold only one patient's rows (a patient question's program needs no more, and a
    zone-mapped subject filter makes this O(patient), not O(table)). Whole tables are scanned lazily from the
    source's Parquet `snapshot` (`pipeline.source.snapshot`) when one is given, so a process holds only what a
    program's filters keep; without one they are read into memory once and shared.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        subject_id: int | None = None,
        shared: dict | None = None,
        snapshot: Path | None = None,
    ):
        self._con, self._subject, self._snapshot = con, subject_id, snapshot
        self._catalog = con.sql("SELECT current_database()").fetchall()[0][0]
        self._frames: dict[str, pl.DataFrame | pl.LazyFrame] = {}  # this view's own (scoped or replaced) frames
        self._shared: dict[str, pl.DataFrame | pl.LazyFrame] = {} if shared is None else shared  # whole tables

    def _view(self, subject_id: int | None) -> Tables:
        return Tables(self._con, subject_id, self._shared, self._snapshot)

    def for_subject(self, subject_id: int | None) -> Tables:
        """A view of the same source scoped to one patient (None: whole tables)."""
        return self._view(subject_id) if subject_id is not None else self

    def whole(self) -> Tables:
        """The unscoped view (whole tables) of the same source, e.g. for a dictionary look-up."""
        view = self._view(None)
        view._frames = {} if self._subject is not None else dict(self._frames)  # a scoped frame is not a whole table
        return view

    def replaced(self, frames: dict[str, pl.DataFrame | pl.LazyFrame]) -> Tables:
        """The same view with some frames replaced (a noisy overlay built in polars); the rest are shared."""
        view = self._view(self._subject)
        view._frames = {**self._frames, **frames}
        return view

    def __getitem__(self, name: str) -> pl.LazyFrame:
        source = f'"{self._catalog}".main.{_identifier(name)}'
        if name in self._frames:
            return self._frames[name].lazy()
        if self._subject is not None and name in _subject_tables():
            self._frames[name] = self._con.sql(
                f"SELECT * FROM {source} WHERE subject_id = ?", params=[self._subject]
            ).pl()
            return self._frames[name].lazy()
        if name not in self._shared:
            self._shared[name] = (
                pl.scan_parquet(table_file(self._snapshot, name))
                if self._snapshot is not None
                else self._con.sql(f"SELECT * FROM {source}").pl()
            )
        return self._shared[name].lazy()


@cache
def _subject_tables() -> frozenset[str]:
    return frozenset(t.name for t in load_schema().values() if "subject_id" in t.column_names)


def tables_for(tables: Tables, template: Template, slots: dict[str, Any]) -> Tables:
    """The view a template's Python program gets: patient-scoped for patient-level templates."""
    return tables.for_subject(slots.get("subject_id")) if template.spec.scope.value == "patient" else tables


def _identifier(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"not a table name: {name!r}")
    return name


def run_sql(con: duckdb.DuckDBPyConnection, template_sql: str, slots: dict[str, Any]) -> pl.DataFrame:
    """Render the SQL template with the slots and execute it."""
    return con.sql(render_sql(template_sql, slots)).pl()


def load_python_program(template: Template):
    """The `gold(tables, slots) -> polars.DataFrame` function defined in the template's `.py` file."""
    return _compiled_gold(template.id, str(Path(template.path).with_suffix(".py")), template.gold_python)


@cache
def _compiled_gold(template_id: str, source_path: str, source: str):
    namespace: dict[str, Any] = {"__name__": f"ehrgym_template_{template_id}"}
    exec(compile(source, source_path, "exec"), namespace)  # trusted: our own template files
    gold = namespace.get("gold")
    if not callable(gold):
        raise ValueError(f"{source_path}: must define a function gold(tables, slots) -> polars.DataFrame")
    return gold
