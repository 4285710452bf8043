"""Write-then-rename: nothing half-written, and nothing that exists is replaced without asking."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.atomic import atomic_output


def test_failure_leaves_nothing(tmp_path: Path):
    with pytest.raises(RuntimeError), atomic_output(tmp_path / "out.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_target_that_appears_meanwhile_is_not_overwritten(tmp_path: Path, kind: str):
    final = tmp_path / "release"
    with pytest.raises(FileExistsError), atomic_output(final) as tmp:
        if kind == "dir":
            tmp.mkdir()
            (tmp / "new.txt").write_text("new")
            final.mkdir()
            (final / "published.txt").write_text("published")
        else:
            tmp.write_text("new")
            final.write_text("published")
    published = final / "published.txt" if kind == "dir" else final
    assert published.read_text() == "published"
    assert [p.name for p in tmp_path.iterdir()] == ["release"]


def test_overwrite_removes_the_replaced_databases_log(tmp_path: Path):
    final = tmp_path / "db.duckdb"
    final.write_text("old")
    (tmp_path / "db.duckdb.wal").write_text("old log")
    with atomic_output(final, overwrite=True) as tmp:
        tmp.write_text("new")
    assert final.read_text() == "new" and not (tmp_path / "db.duckdb.wal").exists()
