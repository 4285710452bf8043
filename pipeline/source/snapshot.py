"""A columnar snapshot of a source database: one Parquet file per table, written once, read lazily by every process.

The Python reference programs read whole tables for population questions. Loaded into memory, that is every
process's copy of chartevents (58 M rows at 10,000 synthetic patients: two workers once exhausted this 24 GiB
machine). Scanned from Parquet instead, polars reads only the columns and row groups a program's filters need, and
every worker and every later build on the same database shares the same files. The snapshot sits beside the
database (in the system's temporary folder when that folder is read-only), keyed by the database file's path, size
and modification time, and is written to a temporary folder first and renamed into place whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from pipeline.db import open_source
from pipeline.source.schema import TABLE_NAMES

ROW_GROUP = 122_880  # rows per Parquet row group: DuckDB's own row group size, fine-grained enough to skip


def snapshot_dir(db: Path) -> Path:
    """Where the snapshot of this database file (as it is now) lives."""
    db = Path(db)
    if not db.is_file():
        raise FileNotFoundError(f"{db}: no such source database file (the snapshot is made from it)")
    stat = db.stat()
    key = hashlib.sha256(f"{db.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    parent = db.parent if os.access(db.parent, os.W_OK) else Path(tempfile.gettempdir())
    return parent / f"{db.stem}.parquet-{key}"


def ensure_snapshot(db: Path) -> Path:
    """The snapshot folder of `db`, written first if it is not there yet (a concurrent writer's finished folder
    wins; nothing half-written is ever at the final path)."""
    folder = snapshot_dir(db)
    if folder.is_dir():
        return folder
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with open_source(db) as con:
            for table in TABLE_NAMES:  # the table's own row order: the polars overlay places rows by it
                target = str(tmp / f"{table}.parquet").replace("'", "''")
                con.execute(f"COPY (SELECT * FROM {table}) TO '{target}' (FORMAT parquet, ROW_GROUP_SIZE {ROW_GROUP})")
        try:
            os.rename(tmp, folder)
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def table_file(folder: Path, table: str) -> Path:
    path = Path(folder) / f"{table}.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the snapshot has no file for table {table!r}")
    return path
