"""A small DuckDB file with MIMIC-IV's patients and labevents tables and a table `big`, for gateway tests."""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipeline.source.schema import load_schema

PATIENTS = [
    "(1, 'F', 60, 2150, '2008 - 2010', NULL)",
    "(2, 'M', 70, 2160, '2011 - 2013', '2165-01-01')",
    "(3, 'F', 50, 2170, '2014 - 2016', NULL)",
]


def small_db(path: Path, patients: int, big_columns: str) -> Path:
    """`path` with the first `patients` of PATIENTS and `big` = SELECT <big_columns> FROM range(3000)."""
    con = duckdb.connect(str(path))
    for name in ("patients", "labevents"):
        con.execute(load_schema()[name].create_sql())
    con.execute(f"INSERT INTO patients VALUES {', '.join(PATIENTS[:patients])}")
    con.execute(f"CREATE TABLE big AS SELECT {big_columns} FROM range(3000)")
    con.close()
    return path
