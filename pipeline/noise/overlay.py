"""Copy-on-write overlays: a patch becomes temp views over the read-only source, one per touched table.

A view named like the table (`labevents`) shadows the source table for unqualified names: the source rows
minus the hidden keys, plus the added rows. Untouched tables are the source's own. No table is copied; the
cost is O(patch).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl
from pipeline.db import scalar
from pipeline.noise.patch import Patch, TablePatch
from pipeline.source.schema import load_schema


def open_source(db_path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the source database; overlays are created on it as temp objects."""
    return duckdb.connect(str(db_path), read_only=True)


def source_catalog(con: duckdb.DuckDBPyConnection) -> str:
    return scalar(con, "SELECT current_database()")


def _create_table_overlay(con: duckdb.DuckDBPyConnection, catalog: str, table: str, patch: TablePatch) -> None:
    spec = load_schema()[table]
    source = f'"{catalog}".main.{table}'
    keys = patch.key_columns
    hide_name, add_name = f"__hide_{table}", f"__add_{table}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {hide_name} AS SELECT {', '.join(keys)} FROM {source} LIMIT 0")
    if patch.hide:
        con.executemany(
            f"INSERT INTO {hide_name} VALUES ({', '.join('?' for _ in keys)})",
            [[key[c] for c in keys] for key in patch.hide],
        )
    con.execute(f"CREATE OR REPLACE TEMP TABLE {add_name} AS SELECT * FROM {source} LIMIT 0")
    if patch.add:
        columns = list(spec.column_names)
        con.executemany(
            f"INSERT INTO {add_name} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
            [[row.get(c) for c in columns] for row in patch.add],
        )
    on = " AND ".join(f"t.{c} IS NOT DISTINCT FROM h.{c}" for c in keys)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {table} AS "
        f"SELECT t.* FROM {source} t ANTI JOIN temp.main.{hide_name} h ON {on} "
        f"UNION ALL SELECT * FROM temp.main.{add_name}"
    )


def drop_overlay(con: duckdb.DuckDBPyConnection, tables: list[str]) -> None:
    for table in tables:
        con.execute(f"DROP VIEW IF EXISTS temp.main.{table}")
        con.execute(f"DROP TABLE IF EXISTS temp.main.__hide_{table}")
        con.execute(f"DROP TABLE IF EXISTS temp.main.__add_{table}")


@contextmanager
def overlay(con: duckdb.DuckDBPyConnection, patch: Patch) -> Iterator[duckdb.DuckDBPyConnection]:
    """Apply the patch as temp views on `con` for the duration of the block, then remove them."""
    catalog, touched = source_catalog(con), patch.touched_tables
    try:
        for table in touched:
            _create_table_overlay(con, catalog, table, patch.tables[table])
        yield con
    finally:
        drop_overlay(con, touched)


def overlay_diff(con: duckdb.DuckDBPyConnection, table: str, patch: TablePatch) -> tuple[int, int]:
    """(source rows missing from the overlay, overlay rows missing from the source) for a table.

    Rows outside the patch's keys are the source's by construction of the view (tests check the whole-table
    identity), so the multiset difference is computed on the keyed rows only: the cost follows the patch.
    """
    from pipeline.noise.evidence import keyed_rows

    source = f'"{source_catalog(con)}".main.{table}'
    keys = [*patch.hide, *({c: row[c] for c in patch.key_columns} for row in patch.add)]
    with keyed_rows(con, source, keys) as rows:
        keyed_source, keyed_overlay = rows(source), rows(table)
        removed = scalar(con, f"SELECT count(*) FROM ({keyed_source} EXCEPT ALL {keyed_overlay})")
        added = scalar(con, f"SELECT count(*) FROM ({keyed_overlay} EXCEPT ALL {keyed_source})")
    return removed, added


def polars_overlay(tables, patch: Patch):
    """The same patch applied in polars to the cached clean frames: an independent second overlay for the
    Python reference programs (hidden keys anti-joined away, added rows appended)."""
    from pipeline.noise.guards import keys_frame

    frames = {}
    for table in patch.touched_tables:
        frame, table_patch = tables[table], patch.tables[table]
        schema = frame.collect_schema()
        if table_patch.hide:
            hidden = keys_frame(table_patch.hide, schema).collect()
            frame = frame.join(hidden.lazy(), on=table_patch.key_columns, how="anti", nulls_equal=True)
        if table_patch.add:  # rows typed like the table (ISO text from a patches.jsonl becomes dates and times)
            frame = pl.concat([frame, keys_frame(table_patch.add, schema).select(list(schema))])
        frames[table] = frame  # lazy: a gold program's filters push down through the anti-join and the union
    return tables.replaced(frames)
