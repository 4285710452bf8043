"""Closing a release frees its source file in the process, even with an episode left open: DuckDB keeps one
instance per file and configuration, so a forgotten cursor would refuse later plain connections."""

from __future__ import annotations

from pathlib import Path

from pipeline.env.release import Release
from pipeline.noise.overlay import open_source


def test_closing_a_release_closes_its_open_episodes(synthetic_small_release_dir: Path, synthetic_db: Path):
    release = Release.open(synthetic_small_release_dir, synthetic_db)
    forgotten = release.episode(release.tasks()[0].task_id)  # never closed by its user
    assert forgotten.call("sql", {"query": "SELECT 1 AS one"}).ok
    release.close()
    assert forgotten.done
    with open_source(synthetic_db) as con:  # another configuration: refused while the episode's cursor lived
        assert con.execute("SELECT count(*) FROM patients").fetchall()[0][0] > 0
