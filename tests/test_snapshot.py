"""The source's Parquet snapshot (source/snapshot.py): one file per table, written once and reused, a new one for a
changed database file, the same frames as the database gives, and nothing half-written left behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest

from pipeline.source.schema import TABLE_NAMES
from pipeline.source.snapshot import ensure_snapshot, snapshot_dir, table_file
from pipeline.templates.programs import Tables


@pytest.fixture(scope="module")
def db_copy(synthetic_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("snapshot") / "source.duckdb"
    shutil.copy(synthetic_db, copy)
    return copy


def test_a_snapshot_holds_every_table_once_and_is_reused(db_copy: Path):
    folder = ensure_snapshot(db_copy)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{t}.parquet" for t in TABLE_NAMES)
    written = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert ensure_snapshot(db_copy) == folder and {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == written
    assert [p.name for p in folder.parent.iterdir() if ".tmp-" in p.name] == []


def test_a_changed_database_file_gets_its_own_snapshot(db_copy: Path):
    before = ensure_snapshot(db_copy)
    stat = db_copy.stat()
    os.utime(db_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert snapshot_dir(db_copy) != before and ensure_snapshot(db_copy).is_dir()


def test_the_snapshot_gives_the_databases_frames_in_its_row_order(db_copy: Path):
    folder = ensure_snapshot(db_copy)
    with duckdb.connect(str(db_copy), read_only=True) as con:
        in_memory, scanned = Tables(con), Tables(con, snapshot=folder)
        for table in ("labevents", "chartevents", "d_labitems", "admissions"):
            expected = in_memory[table].collect()
            assert scanned[table].collect().equals(expected) and expected.height > 0, table
            assert isinstance(scanned._shared[table], pl.LazyFrame)  # scanned, not held
        subject = in_memory["patients"].collect()["subject_id"][0]
        assert (
            scanned.for_subject(subject)["labevents"]
            .collect()
            .equals(in_memory.for_subject(subject)["labevents"].collect())
        )


def test_missing_inputs_are_named():
    with pytest.raises(FileNotFoundError, match="no-such.duckdb"):
        snapshot_dir(Path("/nonexistent/no-such.duckdb"))
    with pytest.raises(FileNotFoundError, match="labevents"):
        table_file(Path("/nonexistent"), "labevents")
