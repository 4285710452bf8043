"""Source facts (pipeline.db.source_fact): computed once per database file and key, from the source's own tables
even while an overlay shadows them, and never shared between two files."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.db import open_source, source_fact
from pipeline.noise.overlay import overlay
from pipeline.noise.patch import Patch, TablePatch


def _count(con, key: tuple, calls: list) -> int:
    def compute(source: str) -> int:
        calls.append(source)
        return con.execute(f"SELECT count(*) FROM {source}labevents").fetchall()[0][0]

    return source_fact(con, key, compute)


def test_a_fact_is_read_from_the_source_once_per_file(synthetic_db: Path, tmp_path: Path):
    first, second = open_source(synthetic_db), open_source(synthetic_db)
    rows = first.execute("SELECT count(*) FROM labevents").fetchall()[0][0]
    hidden = first.execute("SELECT labevent_id FROM labevents ORDER BY labevent_id LIMIT 1").fetchall()[0][0]
    patch = Patch(tables={"labevents": TablePatch(key_columns=["labevent_id"], hide=[{"labevent_id": hidden}])})
    calls: list[str] = []
    key = ("test_rows", str(tmp_path))  # a key no other test uses
    with overlay(first, patch):
        assert first.execute("SELECT count(*) FROM labevents").fetchall()[0][0] == rows - 1  # the overlay is active
        assert _count(first, key, calls) == rows  # and the fact still reads the source
    assert _count(second, key, calls) == rows and len(calls) == 1  # another connection to the file: no new read
    copy = tmp_path / "copy.duckdb"
    shutil.copy(synthetic_db, copy)
    other = open_source(copy)
    assert _count(other, key, calls) == rows and len(calls) == 2  # another file: its own read
    for con in (first, second, other):
        con.close()
