"""A task's evidence rows held in DuckDB, not in Python: what the value and record sub-types count and draw from.

A population question's evidence is a slice of a table (1.4 M heart rates at 10,000 patients, 13.9 M at 100,000).
Read into polars it set a worker's memory peak and cost seconds to convert. Kept in a temporary table instead, only
the rows a sub-type picks and the counts it asks for leave DuckDB. Positions are those of `ORDER BY ALL`, as the
sorted frame had them, so every draw picks the rows it picked before.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import duckdb
import polars as pl

from pipeline.db import scalar
from pipeline.noise.base import Rejected
from pipeline.noise.evidence import as_a_set, keyed_rows
from pipeline.source.schema import load_schema
from pipeline.templates.instantiate import CleanTask
from pipeline.templates.render import sql_literal

ROWS, KEYS = "__cohort", "__cohort_keys"  # temporary tables: one cohort per connection at a time, the latest


class Cohort:
    """The rows of one table that a task's evidence names (`where`: those of them that also meet a condition)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, table: str, where: str = "TRUE"):
        self.con, self.table, self.where = con, table, where
        self.columns = list(load_schema()[table].column_names)
        self._order = ", ".join(self.columns)  # ORDER BY ALL, written out

    def sql(self, columns: str = "*") -> str:
        """The rows (or `columns` of them) as a query."""
        return f"SELECT {columns} FROM temp.main.{ROWS} WHERE {self.where}"

    def filtered(self, condition: str) -> Cohort:
        """The rows that also meet `condition` (SQL over the table's columns), numbered among themselves."""
        return Cohort(self.con, self.table, f"({self.where}) AND ({condition})")

    @cached_property
    def height(self) -> int:
        return scalar(self.con, self.sql("count(*)"))

    def is_empty(self) -> bool:
        return self.height == 0

    def null_count(self, column: str) -> int:
        return scalar(self.con, self.sql(f"count(*) - count({column})"))

    def distinct(self, column: str) -> set:
        """The column's values among the rows (NULL too, as None)."""
        return {row[0] for row in self.con.execute(self.sql(f"DISTINCT {column}")).fetchall()}

    def values(self, column: str) -> pl.Series:
        """The column in row order (a float sum depends on the order it adds in)."""
        return self.con.sql(f"{self.sql(column)} ORDER BY {self._order}").pl()[column]

    def frame(self) -> pl.DataFrame:
        """Every row, in order (for a patient's few)."""
        return self.con.sql(f"{self.sql()} ORDER BY {self._order}").pl()

    def rows_at(self, positions: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at these positions of the sorted rows, in the order given. ORDER BY ALL sorts by the table's
        first column first (a chart row's patient, a lab row's own id), so DuckDB finds the values of that column
        whose rows hold the positions, and only their rows are sorted (three heart rates among 13.9 M: sorting
        the whole cohort took 6.2 s)."""
        if any(not 0 <= p < self.height for p in positions):
            raise IndexError(f"positions {list(positions)} among {self.height} rows of the {self.table} cohort")
        if not positions:
            return []
        first = self.columns[0]
        wanted = pl.DataFrame({"__p": [int(p) for p in positions]}, schema={"__p": pl.Int64})
        groups = (
            f"SELECT {first} AS value, n, sum(n) OVER (ORDER BY {first} ROWS UNBOUNDED PRECEDING) - n AS start "
            f"FROM ({self.sql(f'{first}, count(*) AS n')} GROUP BY {first})"
        )
        self.con.register("__cohort_positions", wanted)
        try:
            hits = self.con.execute(
                f"SELECT DISTINCT g.value, g.n, g.start FROM ({groups}) g JOIN __cohort_positions p "
                f"ON p.__p >= g.start AND p.__p < g.start + g.n ORDER BY g.start"
            ).fetchall()
        finally:
            self.con.unregister("__cohort_positions")
        values = [value for value, _, _ in hits if value is not None]
        among = [f"{first} IN ({', '.join(sql_literal(v) for v in values)})"] if values else []
        among += [f"{first} IS NULL"] if len(values) < len(hits) else []
        rows = self.con.sql(f"SELECT * FROM ({self.sql()}) WHERE {' OR '.join(among)} ORDER BY {self._order}").pl()
        starts = [start for _, _, start in hits]  # where each group begins among all the rows
        bases = list(itertools.accumulate((n for _, n, _ in hits), initial=0))  # and among `rows`
        at = [bisect.bisect_right(starts, p) - 1 for p in positions]
        return [rows.row(bases[g] + p - starts[g], named=True) for g, p in zip(at, positions, strict=True)]

    def subject_sizes(self) -> dict[Any, int]:
        """Rows per patient."""
        return dict(self.con.execute(self.sql("subject_id, count(*)") + " GROUP BY subject_id").fetchall())

    def subject_rows(self, subject: Any) -> list[dict[str, Any]]:
        """One patient's rows, in order."""
        sql = f"SELECT * FROM ({self.sql()}) WHERE subject_id = ? ORDER BY {self._order}"
        return self.con.sql(sql, params=[subject]).pl().to_dicts()


def task_cohort(con: duckdb.DuckDBPyConnection, task: CleanTask) -> tuple[str, list[str], int, Cohort]:
    """(table, key columns, number of evidence keys, the cohort of their rows) of the task's evidence, which must sit
    in one table. A large evidence is keyed by its query, so its keys never leave DuckDB either."""
    columns = [c for c in task.evidence[0] if c != "table_name"]
    if task.evidence_rows is None or task.evidence_rows == len(task.evidence):
        tables = {row["table_name"] for row in task.evidence}
        if len(tables) != 1:
            raise Rejected("evidence_spans_tables")
        table, keys = tables.pop(), [{c: row[c] for c in columns} for row in task.evidence]
        with keyed_rows(con, table, keys) as rows:
            con.execute(f"CREATE OR REPLACE TEMP TABLE {ROWS} AS {rows()}")
        return table, columns, len(keys), Cohort(con, table)
    listed = ", ".join(columns)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {KEYS} AS SELECT table_name, {listed} FROM ({as_a_set(task.evidence_sql)})"
    )
    try:
        named = con.execute(f"SELECT DISTINCT table_name FROM temp.main.{KEYS}").fetchall()
        if len(named) != 1:
            raise Rejected("evidence_spans_tables")
        table, keys = named[0][0], scalar(con, f"SELECT count(*) FROM temp.main.{KEYS}")
        on = " AND ".join(f"t.{c} = k.{c}" for c in columns)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {ROWS} AS SELECT t.* FROM {table} t SEMI JOIN temp.main.{KEYS} k ON {on}"
        )
    finally:
        con.execute(f"DROP TABLE IF EXISTS temp.main.{KEYS}")
    return table, columns, keys, Cohort(con, table)


def drop_cohort(con: duckdb.DuckDBPyConnection) -> None:
    """Free the latest cohort's rows (a sub-type reads them only while it builds its twin)."""
    con.execute(f"DROP TABLE IF EXISTS temp.main.{ROWS}")
