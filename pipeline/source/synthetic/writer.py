"""Writes generated column dicts into a DuckDB file whose tables are created from the schema."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from ..schema import load_schema


class Text:
    """A string column given as codes into a small list of distinct values (written dictionary-encoded)."""

    def __init__(self, values: list, codes: np.ndarray):
        self.values = [None if v is None else str(v) for v in values]
        self.codes = np.asarray(codes, dtype=np.int32)

    @classmethod
    def constant(cls, value, n: int) -> Text:
        return cls([value], np.zeros(n, dtype=np.int32))

    def take(self, rows: np.ndarray) -> Text:
        return Text(self.values, self.codes[rows])

    def to_arrow(self) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array(self.codes), pa.array(self.values, type=pa.string()))


def to_arrow(values) -> pa.Array:
    """numpy / Text column -> arrow; NaN floats and NULL_TIME datetimes become NULL."""
    if isinstance(values, Text):
        return values.to_arrow()
    if isinstance(values, pa.Array):
        return values
    array = np.asarray(values)
    if array.dtype.kind == "M":
        return pa.array(array, from_pandas=True)
    if array.dtype.kind == "f":
        return pa.array(array, from_pandas=True)
    return pa.array(array)


def times(seconds: np.ndarray) -> np.ndarray:
    """Seconds since the epoch (NULL_TIME for missing) as a datetime64 column."""
    return np.asarray(seconds, dtype=np.int64).astype("datetime64[s]")


def dates(seconds: np.ndarray) -> np.ndarray:
    return times(seconds).astype("datetime64[D]")


class DuckWriter:
    """Creates every schema table in a fresh DuckDB file and appends generated chunks to them."""

    def __init__(self, path: Path, memory_limit: str = "1GB", threads: int = 2):
        self.schema = load_schema()
        self.con = duckdb.connect(str(path))
        self.con.execute(f"SET memory_limit = '{memory_limit}'; SET threads = {threads}")
        self.con.execute("SET preserve_insertion_order = true")
        for table in self.schema.values():
            self.con.execute(table.create_sql())
        self.rows = {name: 0 for name in self.schema}

    def insert(self, table: str, columns: dict, derived: dict[str, str] | None = None) -> None:
        """Append `columns` (name -> numpy/Text); `derived` maps table columns to SQL over those columns."""
        n = len(next(iter(columns.values())))
        if n == 0:
            return
        frame = pa.table({name: to_arrow(values) for name, values in columns.items()})
        wanted = set(self.schema[table].column_names)
        select = [f'"{c}"' for c in columns if c in wanted and c not in (derived or {})]
        select += [f"{sql} AS {name}" for name, sql in (derived or {}).items()]
        self.con.register("_chunk", frame)
        try:
            self.con.execute(f"INSERT INTO {table} BY NAME SELECT {', '.join(select)} FROM _chunk")
        finally:
            self.con.unregister("_chunk")
        self.rows[table] += n

    def close(self) -> None:
        self.con.execute("CHECKPOINT")
        self.con.close()


def temporary_path(db_path: Path) -> Path:
    return db_path.with_name(f".{db_path.name}.{os.getpid()}.tmp")


def remove_quietly(path: Path) -> None:
    for candidate in (path, Path(f"{path}.wal")):
        try:
            candidate.unlink()
        except FileNotFoundError:
            pass
