"""Crash containment: agent SQL in a child process (pipeline.env.executor). A query that crashes the engine or
cannot be interrupted costs a restart of the child; the host, the episode and every other open episode go on,
with their overlays applied again.

The crash is real: DuckDB's json_contains recursing on 100,000 nested brackets kills its process with SIGSEGV. The
gateway refuses that function by its reviewed list, so these tests hand the query to the executor directly, as a
query that slipped past admission would reach it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import pipeline.env.gateway as gateway_module
from pipeline.env.episode import SHADOW_TABLES, Episode
from pipeline.env.executor import CRASHED, RUNAWAY, Executor
from pipeline.env.gateway import Gateway, Limits, open_locked
from pipeline.env.timing import probe_patches, probe_task

CRASH = "SELECT json_contains(j, j) FROM (SELECT repeat('[', 100000) || repeat(']', 100000) AS j)"
PATCHED = "SELECT count(*), sum(subject_id) FROM admissions"  # a patch hides rows or alters subject_id


@pytest.fixture(scope="module")
def functions(synthetic_1000: Path) -> frozenset[str]:
    con = open_locked(synthetic_1000, Limits())
    try:
        return Gateway.functions_of(con)
    finally:
        con.close()


@pytest.fixture
def executor(synthetic_1000: Path):
    executor = Executor(synthetic_1000, Limits(seconds=2.0), SHADOW_TABLES, grace=1.0)
    yield executor
    executor.shutdown()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _admissions_patch(db: Path):
    return next(patch for table, patch in probe_patches(db, 10) if table == "admissions")


def test_a_crashing_query_costs_a_restart_not_the_host_nor_the_episodes(synthetic_1000, executor, functions):
    patch = _admissions_patch(synthetic_1000)
    with (
        Episode(probe_task(0), None, patch, functions, Limits(), executor=executor) as noisy,
        Episode(probe_task(1), None, None, functions, Limits(), executor=executor) as clean,
    ):
        before = [ep.call("sql", {"query": PATCHED}).content for ep in (noisy, clean)]
        assert before[0] != before[1], "the noisy episode reads its patched admissions"
        pid = executor.pid
        outcome = executor.run(1, CRASH, 2.0)
        assert not outcome.ok and outcome.error == CRASHED
        assert executor.restarts == 1 and executor.pid != pid and not _alive(pid)
        after = [ep.call("sql", {"query": PATCHED}).content for ep in (noisy, clean)]
        assert after == before, "both episodes go on, each with its own overlay applied again"


def test_a_query_the_watchdog_cannot_stop_is_killed_with_the_child(synthetic_1000, executor, functions):
    with Episode(probe_task(0), None, None, functions, Limits(), executor=executor) as episode:
        pid = executor.pid
        os.kill(pid, signal.SIGSTOP)  # a function that never returns to check for an interrupt, as seen from outside
        started = time.monotonic()
        result = episode.call("sql", {"query": "SELECT count(*) FROM patients"})
        waited = time.monotonic() - started
        assert result.content == "Error: " + RUNAWAY.format(seconds=2.0)
        assert waited >= 2.0 and executor.restarts == 1 and not _alive(pid)
        assert episode.call("sql", {"query": "SELECT count(*) FROM patients"}).content.startswith("count_star()")


def test_no_child_outlives_the_executor(synthetic_1000, functions):
    executor = Executor(synthetic_1000, Limits(), SHADOW_TABLES)
    with Episode(probe_task(0), None, None, functions, Limits(), executor=executor) as episode:
        assert episode.call("sql", {"query": "SELECT 1 AS one"}).ok
    pid = executor.pid
    executor.shutdown()
    assert not _alive(pid)


def test_the_server_survives_a_crashing_query(
    synthetic_small_release_dir: Path, synthetic_db: Path, monkeypatch: pytest.MonkeyPatch
):
    from pipeline.env.release import Release
    from pipeline.env.server import create_app

    monkeypatch.setattr(gateway_module, "admit_cached", lambda sql, tables, functions: sql)  # let it through
    with Release.open(synthetic_small_release_dir, synthetic_db, isolate=True) as release:
        client = TestClient(create_app(release))
        task_id = release.tasks()[0].task_id
        episode = client.post("/episodes", json={"task_id": task_id}).json()["episode_id"]

        def step(query: str) -> dict:
            return client.post(f"/episodes/{episode}/step", json={"tool": "sql", "arguments": {"query": query}}).json()

        assert CRASHED in json_text(step(CRASH))
        assert "count_star()" in json_text(step("SELECT count(*) FROM patients"))
        assert release.executor.restarts == 1


def json_text(response: dict) -> str:
    return str(response)


def test_memory_past_the_childs_ceiling_fails_in_the_child(synthetic_1000, functions):
    """String values escape DuckDB's memory_limit; the child's address-space ceiling does not let them grow past it."""
    executor = Executor(synthetic_1000, Limits(seconds=20.0), SHADOW_TABLES, address_space_gb=1.5)
    try:
        with Episode(probe_task(0), None, None, functions, Limits(), executor=executor) as episode:
            remote = executor.open_episodes[-1]
            outcome = executor.run(
                remote,
                "SELECT max(length(s)) FROM (SELECT list(repeat('x', 1000000)) AS l "
                "FROM range(3000)) t, unnest(l) u(s)",
                20.0,
            )
            assert not outcome.ok, "3 GB of strings under a 1.5 GB ceiling"
            assert episode.call("sql", {"query": "SELECT count(*) FROM patients"}).ok  # and the episode goes on
    finally:
        executor.shutdown()
