"""Copy-on-write overlays: a patch becomes temp views over the read-only source, one per touched table.

A view named like the table (`labevents`) shadows the source table for unqualified names: the source rows
minus the hidden rowids, plus the added rows, in the source's order. Untouched tables are the source's own unless
shadowed by a no-op view of the same shape (episodes shadow every table). No table is copied; creating an
overlay costs one scan per touched table to resolve the hidden keys to rowids.

Keeping every row at its position means sorting the whole table in each query that reads it (a population mean of
a lab through the view: 40 ms, not 6 ms, on 1,000 patients). An agent's episode pays that, so that no row order
tells which patient was patched; verification does not need it (`ordered=False`): there the rows of the patients
the patch leaves alone come first, in the source's scan order, and the patched patients' rows follow, at their
positions. The rows are the same, and each patient's rows keep the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl
import sqlglot

from pipeline.db import scalar
from pipeline.noise.patch import Patch, TablePatch
from pipeline.source.schema import load_schema
from pipeline.templates.render import sql_literal


def open_source(db_path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the source database; overlays are created on it as temp objects."""
    return duckdb.connect(str(db_path), read_only=True)


def source_catalog(con: duckdb.DuckDBPyConnection) -> str:
    return scalar(con, "SELECT current_database()")


def _anchor_column(columns) -> str:
    """Rows of the same patient (else of the same first column) are where an added row can sit."""
    return "subject_id" if "subject_id" in columns else columns[0]


def _table_anchor(table: str) -> str:
    """The anchor column of a source table (its patient, else its first column)."""
    return _anchor_column(list(load_schema()[table].column_names))


def _weights(table: str) -> dict[str, int]:
    """How much an equal column says two rows are one record: a time more than a value and its text together, so a
    duplicate sits by its own row (same time, other value), not by an equal value charted hours apart."""
    return {c.name: 3 if c.duckdb_type.startswith(("TIMESTAMP", "DATE")) else 1 for c in load_schema()[table].columns}


def _apply_patch(con: duckdb.DuckDBPyConnection, source: str, table: str, patch: TablePatch) -> None:
    """The patch's hidden keys resolved to rowids in `__gone_<table>` (once, not in every scan) and its added rows
    placed in `__rows_<table>`; `__hide_<table>` and `__add_<table>` show them by key and row to the pipeline."""
    columns = list(load_schema()[table].column_names)
    keys, hide_name, rows = patch.key_columns, f"__hide_{table}", f"__rows_{table}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {hide_name} AS SELECT {', '.join(keys)} FROM {source} LIMIT 0")
    if patch.hide:
        _insert(con, hide_name, source, [{c: key[c] for c in keys} for key in patch.hide])
        on = " AND ".join(f"t.{c} IS NOT DISTINCT FROM h.{c}" for c in keys)
        con.execute(
            f"INSERT INTO temp.main.__gone_{table} SELECT t.rowid, 0, t.{_table_anchor(table)} FROM {source} t "
            f"SEMI JOIN temp.main.{hide_name} h ON {on}"
        )
    if patch.add:
        _insert(con, rows, source, [{c: row.get(c) for c in columns} for row in patch.add], numbered=("__sub", 1))
        _place_added(con, source, rows, table)
    for column, moves in patch.renumber.items():
        _renumber(con, source, table, column, moves)
    con.execute(f"CREATE OR REPLACE TEMP VIEW __add_{table} AS SELECT * FROM temp.main.{rows} WHERE __sub > 0")


_MOVES = {"old": pl.Int64, "new": pl.Int64}


def _insert(
    con: duckdb.DuckDBPyConnection,
    target: str,
    source: str,
    rows: list[dict],
    numbered: tuple[str, int] | None = None,
) -> None:
    """Insert rows (values as the patch holds them, ISO text for times too) into `target` by name, typed like
    `source`'s columns, in one statement (a missing_record patch hides thousands of keys; `executemany` pays one
    statement per row). `numbered=(column, start)` adds a column counting the rows from `start`."""
    from pipeline.noise.guards import keys_frame

    columns = list(rows[0])
    schema = con.sql(f"SELECT {', '.join(columns)} FROM {source} LIMIT 0").pl().schema
    frame = keys_frame(rows, schema).collect()
    if numbered is not None:
        name, start = numbered
        frame = frame.with_row_index(name, offset=start).with_columns(pl.col(name).cast(pl.Int64))
    con.register("__inserted", frame)
    try:
        listed = ", ".join(frame.columns)
        con.execute(f"INSERT INTO {target} ({listed}) SELECT {listed} FROM __inserted")
    finally:
        con.unregister("__inserted")


def _renumber(con: duckdb.DuckDBPyConnection, source: str, table: str, column: str, moves: dict[int, int]) -> None:
    """Source rows whose id the patch only changes: hidden at their position and shown again there with the new
    id (sub-positions below the sentinel's, so `__add_<table>` leaves them out: they are no noise rows)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE __moves_{table} (old BIGINT, new BIGINT)")
    con.register("__moves", pl.DataFrame({"old": list(moves), "new": list(moves.values())}, schema=_MOVES))
    try:
        con.execute(f"INSERT INTO __moves_{table} SELECT old, new FROM __moves")
    finally:
        con.unregister("__moves")
    anchor = _table_anchor(table)
    con.execute(
        f"INSERT INTO temp.main.__gone_{table} SELECT t.rowid, 0, t.{anchor} FROM {source} t "
        f"SEMI JOIN temp.main.__moves_{table} m ON t.{column} = m.old"
    )
    con.execute(
        f"INSERT INTO temp.main.__rows_{table} SELECT t.* REPLACE (m.new AS {column}), t.rowid, "
        f"-1 - row_number() OVER (ORDER BY t.rowid) FROM {source} t JOIN temp.main.__moves_{table} m "
        f"ON t.{column} = m.old"
    )
    con.execute(f"DROP TABLE temp.main.__moves_{table}")


def _overlay_tables_sql(source: str, table: str) -> str:
    """The tables an overlay view reads besides the source: `__rows_<table>` (added rows at (neighbour's rowid,
    1..n)) and `__gone_<table>` (hidden positions, with each row's anchor). Both start with a sentinel at (-1, -1)
    that cancels out, so an empty patch plans and scans like any other."""
    rows, gone = f"temp.main.__rows_{table}", f"temp.main.__gone_{table}"
    anchor = _table_anchor(table)
    nulls = "FROM (SELECT 1) d LEFT JOIN"  # a typed all-NULL sentinel row
    return (
        f"CREATE OR REPLACE TEMP TABLE {rows} AS SELECT s.*, -1::BIGINT AS __pos, -1::BIGINT AS __sub "
        f"{nulls} (SELECT * FROM {source} LIMIT 0) s ON true;\n"
        f"CREATE OR REPLACE TEMP TABLE {gone} AS SELECT -1::BIGINT AS __pos, -1::BIGINT AS __sub, "
        f"s.{anchor} AS __anchor {nulls} (SELECT {anchor} FROM {source} LIMIT 0) s ON true"
    )


def _overlay_view_sql(source: str, table: str, touched: list | None) -> str:
    """The one shape of every overlay view: the source rows (position rowid, 0) and `__rows_<table>`, less the
    positions in `__gone_<table>`, in position order. With `touched` (the anchors of the patch's rows: unordered,
    see the module's docstring) only those anchors' rows are put in position order, after the others, which a
    filter passes in the source's scan order (a join would not keep it)."""
    rows, gone = f"temp.main.__rows_{table}", f"temp.main.__gone_{table}"
    positioned = (
        f"SELECT u.* EXCLUDE (__pos, __sub) FROM (SELECT t.*, t.rowid AS __pos, 0::BIGINT AS __sub "
        f"FROM {source} t{{where}} UNION ALL SELECT * FROM {rows}) u "
        f"ANTI JOIN {gone} g ON u.__pos = g.__pos AND u.__sub = g.__sub ORDER BY u.__pos, u.__sub"
    )
    if touched is None:
        view = positioned.format(where="")
    elif not touched:
        view = f"SELECT * FROM {source}"  # nothing patched: the source itself
    else:
        anchor = _table_anchor(table)
        others, patched = _anchor_filters(f"t.{anchor}", touched)
        view = f"SELECT t.* FROM {source} t WHERE {others} UNION ALL SELECT * FROM ({positioned.format(where=patched)})"
    return f"CREATE OR REPLACE TEMP VIEW {table} AS {view}"


def _anchor_filters(column: str, touched: list) -> tuple[str, str]:
    """SQL conditions for the rows whose anchor is not among `touched` and (with ' WHERE ') the rows whose is."""
    values = ", ".join(sqlglot.exp.convert(v).sql("duckdb") for v in touched if v is not None)
    has_null = None in touched
    if not values:
        return f"{column} IS NOT NULL", f" WHERE {column} IS NULL"
    if has_null:
        return f"{column} NOT IN ({values})", f" WHERE {column} IN ({values}) OR {column} IS NULL"
    return f"({column} IS NULL OR {column} NOT IN ({values}))", f" WHERE {column} IN ({values})"


def _touched_anchors(con: duckdb.DuckDBPyConnection, table: str) -> list:
    """The anchors (patients) of the rows a table's patch hides, renumbers or adds, in a fixed order."""
    anchor = _table_anchor(table)
    found = con.execute(
        f"SELECT DISTINCT __anchor FROM temp.main.__gone_{table} WHERE __sub = 0 "
        f"UNION SELECT {anchor} FROM temp.main.__rows_{table} WHERE __sub <> -1"
    ).fetchall()
    return sorted((row[0] for row in found), key=lambda v: (v is None, v))


def _place_added(con: duckdb.DuckDBPyConnection, source: str, add_name: str, table: str) -> None:
    """Each added row sits right after the source row most like it (the row it alters or duplicates: most
    equal columns, times weighing triple, same patient; ties: the first), so patched rows come back where the
    record keeps them, not last. A row with no such neighbour goes after the table's last row."""
    weights = _weights(table)
    near = _anchor_column(list(weights))
    score = " + ".join(f"{w} * (s.{c} IS NOT DISTINCT FROM a.{c})::INT" for c, w in weights.items())
    # the best score, then the first row: one number per pair (the score above the rowid's bits), its maximum per
    # added row found by a hash aggregate; a window sorted every pair (257 altered chart rows x their patient's
    # 23,040 took 2.7 s at 10,000 patients, the aggregate 0.35 s)
    best = f"({score})::BIGINT * {2**40} - s.rowid"
    con.execute(
        f"UPDATE {add_name} SET __pos = best.pos FROM ("
        f"SELECT a.__sub AS sub, arg_max(s.rowid, {best}) AS pos FROM {add_name} a JOIN {source} s "
        f"ON s.{near} = a.{near} GROUP BY a.__sub"
        f") best WHERE best.sub = {add_name}.__sub"
    )
    con.execute(f"UPDATE {add_name} SET __pos = (SELECT coalesce(max(rowid), 0) + 1 FROM {source}) WHERE __pos IS NULL")


def drop_overlay(con: duckdb.DuckDBPyConnection, tables: list[str]) -> None:
    if tables:
        con.execute(
            "".join(
                f"DROP VIEW IF EXISTS temp.main.{table}; DROP VIEW IF EXISTS temp.main.__add_{table}; "
                f"DROP TABLE IF EXISTS temp.main.__hide_{table}; DROP TABLE IF EXISTS temp.main.__rows_{table}; "
                f"DROP TABLE IF EXISTS temp.main.__gone_{table};"
                for table in tables
            )
        )


@contextmanager
def overlay(
    con: duckdb.DuckDBPyConnection, patch: Patch | None, shadow: Iterable[str] = (), ordered: bool = True
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Apply the patch as temp views on `con` for the duration of the block, then remove them. Tables in `shadow`
    the patch leaves alone get a view of the same shape over an empty patch (an episode shadows every table, so
    that clean and noisy episodes read through the same relations). `ordered=False`: the patched patients' rows
    after the others (verification; see the module's docstring)."""
    catalog = source_catalog(con)
    tables, touched = (patch.tables, patch.touched_tables) if patch is not None else ({}, [])
    views = sorted({*touched, *shadow})
    try:  # one batch for the views: an episode opens 31 of them
        sources = {table: f'"{catalog}".main.{table}' for table in views}
        if views:
            con.execute(";\n".join(_overlay_tables_sql(sources[table], table) for table in views))
        for table in touched:
            _apply_patch(con, sources[table], table, tables[table])
        if views:
            touched_by = {t: None if ordered else _touched_anchors(con, t) if t in touched else [] for t in views}
            con.execute(";\n".join(_overlay_view_sql(sources[t], t, touched_by[t]) for t in views))
        yield con
    finally:
        drop_overlay(con, views)


def overlay_diff(con: duckdb.DuckDBPyConnection, table: str, patch: TablePatch) -> tuple[int, int]:
    """(source rows missing from the overlay, overlay rows missing from the source) for a table; a renumbered row
    counts on both sides.

    Rows outside the patch's keys are the source's by construction of the view (tests check the whole-table
    identity), so the multiset difference is computed on the keyed rows only: the cost follows the patch.
    """
    from pipeline.noise.evidence import keyed_rows

    source = f'"{source_catalog(con)}".main.{table}'
    keys = [*patch.hide, *({c: row[c] for c in patch.key_columns} for row in patch.add)]
    keys += [{column: i} for column, moves in patch.renumber.items() for move in moves.items() for i in move]
    with keyed_rows(con, source, keys) as rows:
        keyed_source, keyed_overlay = rows(source), rows(table)
        removed = scalar(con, f"SELECT count(*) FROM ({keyed_source} EXCEPT ALL {keyed_overlay})")
        added = scalar(con, f"SELECT count(*) FROM ({keyed_overlay} EXCEPT ALL {keyed_source})")
    return removed, added


def less_source_records(table: str, source: str, record: list[str], rows: list[dict]) -> str:
    """SQL for the overlay view `table` less the source rows of the records some `rows` belong to (`record`: the
    columns that make one record): the conflicting records read by their added rows alone. Only those records'
    rows are compared (a multiset difference over the whole table hashed all of labevents, 50 s a pair at 100,000
    patients); a row outside them cannot equal a source row inside them."""
    # a column an added row leaves out is NULL in the overlay, and so in its record (`IN` compares tuples NULL-safe)
    tuples = ", ".join("(" + ", ".join(sql_literal(row.get(c)) for c in record) + ")" for row in rows)
    within = f"({', '.join(record)}) IN ({tuples})"
    return (
        f"SELECT * FROM {table} WHERE ({within}) IS NOT TRUE "
        f"UNION ALL (SELECT * FROM {table} WHERE {within} EXCEPT ALL SELECT * FROM {source} WHERE {within})"
    )


def polars_overlay(tables, patch: Patch, ordered: bool = True):
    """The same patch applied in polars to the cached clean frames: an independent second overlay for the
    Python reference programs (hidden keys anti-joined away, added rows placed as the SQL overlay places them;
    `ordered=False`: the patched anchors' rows after the others, as `overlay(ordered=False)` has them)."""
    from pipeline.noise.guards import keys_frame

    frames = {}
    for table in patch.touched_tables:
        source, table_patch = tables[table], patch.tables[table]
        schema = source.collect_schema()
        # typed like the table once (ISO text from a patches.jsonl becomes dates and times)
        hidden = keys_frame(table_patch.hide, schema).collect() if table_patch.hide else None
        added = keys_frame(table_patch.add, schema).select(list(schema)).collect() if table_patch.add else None
        if ordered:
            frames[table] = (
                _patched(source, table_patch, hidden, added, table).sort("__pos", "__sub").drop("__pos", "__sub")
            )
            continue  # lazy: filters push down
        anchor = _anchor_column(list(schema))
        anchors = _touched_anchor_values(source, table_patch, hidden, added, schema, anchor)
        is_touched = pl.col(anchor).is_in(anchors.drop_nulls().implode())
        if anchors.null_count():
            is_touched = is_touched | pl.col(anchor).is_null()
        # the patched anchors' rows are numbered among themselves (in the source's order, so they keep it): a
        # number over the whole table reads all of it (6 GB for chartevents at 10,000 patients), theirs only theirs
        positioned = _patched(source.filter(is_touched), table_patch, hidden, added, table)
        frames[table] = pl.concat(
            [source.filter(~is_touched.fill_null(False)), positioned.sort("__pos", "__sub").drop("__pos", "__sub")],
            how="diagonal_relaxed",
        )
    return tables.replaced(frames)


def _patched(
    rows: pl.LazyFrame, table_patch: TablePatch, hidden: pl.DataFrame | None, added: pl.DataFrame | None, table: str
) -> pl.LazyFrame:
    """`rows` (the table, or its patched anchors' rows) with the patch applied, each row at its position among them
    (`__pos`, `__sub`): renumbered ids in place, the `hidden` keys anti-joined away, the `added` rows placed (both
    frames typed like the table, or None)."""
    frame = rows.with_row_index("__pos")
    for column, moves in table_patch.renumber.items():  # renumbered source rows keep their place
        frame = frame.with_columns(pl.col(column).replace(list(moves), list(moves.values())))
    if hidden is not None:
        frame = frame.join(hidden.lazy(), on=table_patch.key_columns, how="anti", nulls_equal=True)
    frame = frame.with_columns(pl.col("__pos").cast(pl.Int64), pl.lit(0, pl.Int64).alias("__sub"))
    if added is not None:
        frame = pl.concat([frame, _placed(rows.with_row_index("__pos"), added.lazy(), table)], how="diagonal_relaxed")
    return frame


def _touched_anchor_values(
    source: pl.LazyFrame,
    table_patch: TablePatch,
    hidden: pl.DataFrame | None,
    added: pl.DataFrame | None,
    schema: pl.Schema,
    anchor: str,
) -> pl.Series:
    """The anchors of the rows a table patch hides, renumbers or adds (as `_touched_anchors` finds them in SQL)."""
    touched: list[pl.LazyFrame] = []
    for column, moves in table_patch.renumber.items():
        # the rows that move, and the rows whose id a moved row takes: a filter on the source's ids, which the
        # Parquet scan prunes by (renumbering the whole table first read all of labevents: 10 s at 100,000 patients)
        ids = pl.Series(column, [*moves, *moves.values()], schema[column])
        touched.append(source.filter(_among(ids)).select(anchor))
    if hidden is not None:
        candidates = source.filter(*[_among(hidden[column]) for column in table_patch.key_columns])
        touched.append(
            candidates.join(hidden.lazy(), on=table_patch.key_columns, how="semi", nulls_equal=True).select(anchor)
        )
    if added is not None:
        touched.append(added.lazy().select(anchor))
    return pl.concat(touched).unique().collect()[anchor] if touched else pl.Series(anchor, [], schema[anchor])


def _among(values: pl.Series) -> pl.Expr:
    """The rows whose column holds one of `values` (null among them: a null too), as a filter the Parquet scan
    prunes row groups by, so that a semi join on keys reads the keys' row groups, not the whole table."""
    found = pl.col(values.name).is_in(values.drop_nulls().unique().implode())
    return found | pl.col(values.name).is_null() if values.null_count() else found.fill_null(False)


def _placed(source: pl.LazyFrame, added: pl.LazyFrame, table: str) -> pl.LazyFrame:
    """The added rows with the position `_place_added` gives them in SQL (after the source row most like them)."""
    weights = _weights(table)
    columns, near = list(weights), _anchor_column(list(weights))
    added = added.with_row_index("__sub", offset=1).with_columns(pl.col("__sub").cast(pl.Int64))
    score = pl.sum_horizontal(*[w * pl.col(c).eq_missing(pl.col(f"{c}__a")).cast(pl.Int32) for c, w in weights.items()])
    renamed = added.rename({c: f"{c}__a" for c in columns}).with_columns(pl.col(f"{near}__a").alias("__near"))
    pairs = source.join(renamed, left_on=near, right_on="__near", how="inner")
    best = (
        pairs.with_columns(score.alias("__score"))
        .sort("__sub", "__score", "__pos", descending=[False, True, False])
        .group_by("__sub", maintain_order=True)
        .first()
        .select("__sub", pl.col("__pos").cast(pl.Int64))
    )
    end = source.select((pl.len().cast(pl.Int64)).alias("__end"))
    return (
        added.join(best, on="__sub", how="left")
        .join(end, how="cross")
        .with_columns(pl.col("__pos").fill_null(pl.col("__end")))
        .drop("__end")
    )
