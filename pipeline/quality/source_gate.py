"""The source quality gate: every MIMIC-IV table of a DuckDB file against its suite in `expectations/source/`.

Row-wise rules run in Great Expectations on frames that DuckDB computes in batches; the two rules that
need the whole table (primary-key uniqueness, foreign keys) are turned into per-row columns by DuckDB
first, each NULL where the row is fine and the offending key otherwise (so a report shows the keys):
`__pk_duplicate` (the row's primary key when other rows share it) and `__fk__<columns>__<parent>`
(the row's reference when the parent has no such key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pandas as pd

from pipeline.quality.gx_runner import GateReport, SuiteReport, expectation_columns, load_suite_json, validate_batches
from pipeline.source.schema import ForeignKey, Table, load_schema

PK_DUPLICATE = "__pk_duplicate"
BATCH_ROWS = 1_000_000
DEFAULT_SUITES = Path(__file__).resolve().parents[2] / "expectations" / "source"


def fk_column(fk: ForeignKey) -> str:
    """The derived column that holds the row's unresolved reference of `fk` (NULL when it resolves)."""
    return f"__fk__{'__'.join(fk.columns)}__{fk.references}"


def check_query(table: Table, columns: list[str]) -> str:
    """SQL for the frame a suite validates: the named plain columns plus the derived key columns."""
    fks = {fk_column(fk): fk for fk in table.foreign_keys}
    select: list[str] = []
    joins: list[str] = []
    for name in columns:
        if name == PK_DUPLICATE:
            keys = ", ".join(f"t.{c}" for c in table.primary_key or ())
            select.append(
                f"CASE WHEN count(*) OVER (PARTITION BY {keys}) > 1 THEN {_key_text('t', table.primary_key)} END "
                f"AS {PK_DUPLICATE}"
            )
        elif name in fks:
            alias = f"p{len(joins)}"
            fk = fks[name]
            ref = ", ".join(f"{r} AS k{i}" for i, r in enumerate(fk.ref_columns))
            on = " AND ".join(f"t.{c} = {alias}.k{i}" for i, c in enumerate(fk.columns))
            joins.append(f"LEFT JOIN (SELECT DISTINCT {ref} FROM {fk.references}) {alias} ON {on}")
            child_null = " OR ".join(f"t.{c} IS NULL" for c in fk.columns)
            select.append(
                f"CASE WHEN NOT ({child_null} OR {alias}.k0 IS NOT NULL) THEN {_key_text('t', fk.columns)} "
                f"END AS {name}"
            )
        elif name in table.column_names:
            select.append(f"t.{name}")
        else:
            raise ValueError(f"suite for table {table.name!r} names unknown column {name!r}")
    return f"SELECT {', '.join(select)} FROM {table.name} t {' '.join(joins)}"


def _key_text(alias: str, columns) -> str:
    """A key as one text value, e.g. `'20000|3'` for a two-column key."""
    return "concat_ws('|', " + ", ".join(f"CAST({alias}.{c} AS VARCHAR)" for c in columns) + ")"


def frames(con: duckdb.DuckDBPyConnection, sql: str, batch_rows: int = BATCH_ROWS) -> Iterator[pd.DataFrame]:
    """The query's result as pandas frames of at most `batch_rows` rows (at least one, maybe empty)."""
    reader = con.sql(sql).to_arrow_reader(batch_rows)
    yielded = False
    for batch in reader:
        yielded = True
        yield batch.to_pandas()
    if not yielded:
        yield reader.schema.empty_table().to_pandas()


def suite_columns(suite_json: dict) -> list[str]:
    seen: dict[str, None] = {}
    for expectation in suite_json["expectations"]:
        seen.update(dict.fromkeys(expectation_columns(expectation["kwargs"])))
    return list(seen)


def validate_table(con: duckdb.DuckDBPyConnection, table: Table, suite_json: dict) -> SuiteReport:
    sql = check_query(table, suite_columns(suite_json))
    return validate_batches(suite_json, frames(con, sql))


def validate_source(
    db_path: Path,
    suites_dir: Path = DEFAULT_SUITES,
    on_suite: Callable[[SuiteReport], None] | None = None,
) -> GateReport:
    """Run every table's suite on the database (opened read-only); a table without a suite is an error."""
    schema, suites_dir = load_schema(), Path(suites_dir)
    if not Path(db_path).is_file():
        raise FileNotFoundError(f"{db_path}: no such database file")
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        present = {
            r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()
        }
        reports = []
        for name, table in schema.items():
            if name not in present:
                raise ValueError(f"{db_path}: table {name!r} is missing; expected all 31 MIMIC-IV tables")
            suite_path = suites_dir / f"{name}.json"
            if not suite_path.is_file():
                raise FileNotFoundError(f"{suite_path}: no expectation suite for table {name!r}")
            report = validate_table(con, table, load_suite_json(suite_path))
            reports.append(report)
            if on_suite:
                on_suite(report)
    finally:
        con.close()
    return GateReport("source", str(db_path), reports)
