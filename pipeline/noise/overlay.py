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


def _anchor_column(columns) -> str:
    """Rows of the same patient (else of the same first column) are where an added row can sit."""
    return "subject_id" if "subject_id" in columns else columns[0]


def _create_table_overlay(con: duckdb.DuckDBPyConnection, catalog: str, table: str, patch: TablePatch) -> None:
    spec = load_schema()[table]
    source = f'"{catalog}".main.{table}'
    keys, columns = patch.key_columns, list(spec.column_names)
    hide_name, add_name = f"__hide_{table}", f"__add_{table}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {hide_name} AS SELECT {', '.join(keys)} FROM {source} LIMIT 0")
    if patch.hide:
        con.executemany(
            f"INSERT INTO {hide_name} VALUES ({', '.join('?' for _ in keys)})",
            [[key[c] for c in keys] for key in patch.hide],
        )
    con.execute(f"CREATE OR REPLACE TEMP TABLE {add_name} AS SELECT *, NULL::BIGINT AS __pos, 0::BIGINT AS __sub FROM {source} LIMIT 0")
    if patch.add:
        con.executemany(
            f"INSERT INTO {add_name} ({', '.join(columns)}, __sub) VALUES ({', '.join('?' for _ in columns)}, ?)",
            [[row.get(c) for c in columns] + [n + 1] for n, row in enumerate(patch.add)],
        )
        _place_added(con, source, add_name, columns)
    on = " AND ".join(f"t.{c} IS NOT DISTINCT FROM h.{c}" for c in keys)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * EXCLUDE (__pos, __sub) FROM ("
        f"SELECT t.*, t.rowid AS __pos, 0::BIGINT AS __sub FROM {source} t ANTI JOIN temp.main.{hide_name} h ON {on} "
        f"UNION ALL SELECT * FROM temp.main.{add_name}) ORDER BY __pos, __sub"
    )


def _place_added(con: duckdb.DuckDBPyConnection, source: str, add_name: str, columns: list[str]) -> None:
    """Each added row sits right after the source row most like it (the row it alters or duplicates: most
    equal columns, same patient; ties: the first), so patched rows come back where the record keeps them,
    not last. A row with no such neighbour goes after the table's last row."""
    near = _anchor_column(columns)
    score = " + ".join(f"(s.{c} IS NOT DISTINCT FROM a.{c})::INT" for c in columns)
    con.execute(
        f"UPDATE {add_name} SET __pos = best.pos FROM ("
        f"SELECT a.__sub AS sub, s.rowid AS pos FROM {add_name} a JOIN {source} s ON s.{near} = a.{near} "
        f"QUALIFY row_number() OVER (PARTITION BY a.__sub ORDER BY {score} DESC, s.rowid) = 1"
        f") best WHERE best.sub = {add_name}.__sub"
    )
    con.execute(f"UPDATE {add_name} SET __pos = (SELECT coalesce(max(rowid), 0) + 1 FROM {source}) WHERE __pos IS NULL")


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
    Python reference programs (hidden keys anti-joined away, added rows placed as the SQL overlay places them)."""
    from pipeline.noise.guards import keys_frame

    frames = {}
    for table in patch.touched_tables:
        frame, table_patch = tables[table].with_row_index("__pos"), patch.tables[table]
        schema = tables[table].collect_schema()
        if table_patch.hide:
            hidden = keys_frame(table_patch.hide, schema).collect()
            frame = frame.join(hidden.lazy(), on=table_patch.key_columns, how="anti", nulls_equal=True)
        frame = frame.with_columns(pl.col("__pos").cast(pl.Int64), pl.lit(0, pl.Int64).alias("__sub"))
        if table_patch.add:  # rows typed like the table (ISO text from a patches.jsonl becomes dates and times)
            added = keys_frame(table_patch.add, schema).select(list(schema))
            frame = pl.concat([frame, _placed(tables[table].with_row_index("__pos"), added, list(schema))], how="diagonal_relaxed")
        frames[table] = frame.sort("__pos", "__sub").drop("__pos", "__sub")  # lazy: filters push down
    return tables.replaced(frames)


def _placed(source: pl.LazyFrame, added: pl.LazyFrame, columns: list[str]) -> pl.LazyFrame:
    """The added rows with the position `_place_added` gives them in SQL (after the source row most like them)."""
    near = _anchor_column(columns)
    added = added.with_row_index("__sub", offset=1).with_columns(pl.col("__sub").cast(pl.Int64))
    score = pl.sum_horizontal(*[pl.col(c).eq_missing(pl.col(f"{c}__a")).cast(pl.Int32) for c in columns])
    renamed = added.rename({c: f"{c}__a" for c in columns}).with_columns(pl.col(f"{near}__a").alias("__near"))
    pairs = source.join(renamed, left_on=near, right_on="__near", how="inner")
    best = (pairs.with_columns(score.alias("__score")).sort("__sub", "__score", "__pos", descending=[False, True, False])
            .group_by("__sub", maintain_order=True).first().select("__sub", pl.col("__pos").cast(pl.Int64)))
    end = source.select((pl.len().cast(pl.Int64)).alias("__end"))
    return (added.join(best, on="__sub", how="left").join(end, how="cross")
            .with_columns(pl.col("__pos").fill_null(pl.col("__end"))).drop("__end"))
