"""The timing channel, deterministic half: a clean episode and its noisy twin run the same physical plan for the
same scan of every table, so repeated scans cannot single out the patched one by the work they do.

32 patches (1-3 rows of one of 10 tables hidden, mostly re-added altered, as the noise sub-types do) are opened
as noisy episodes and as their clean twins; the plan of a full scan of each of the 10 tables must match between
the two, cardinality estimates aside. On the old layout (untouched tables read directly) the patched table's plan
differs, so the test can fail. The timing itself is measured, not asserted: benchmarks/bench_timing.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pipeline.env.episode as episode_module
from pipeline.env.episode import Episode
from pipeline.env.gateway import Gateway, Limits, open_locked
from pipeline.env.timing import PROBE_TABLES as TABLES
from pipeline.env.timing import SCAN_SQL, plan_shape, probe_patches, probe_task
from pipeline.noise.patch import Patch
from pipeline.source.schema import load_schema

EPISODES = 32


@pytest.fixture(scope="module")
def patches(synthetic_1000: Path) -> list[tuple[str, Patch]]:
    return probe_patches(synthetic_1000, EPISODES)


def _plans(db: Path, patches: list[tuple[str, Patch]]) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(patched table, clean plans, noisy plans) per patch; plans by table."""
    con = open_locked(db, Limits())
    schema, out = load_schema(), []
    try:
        functions = Gateway.functions_of(con)
        for n, (table, patch) in enumerate(patches):
            plans = []
            for noisy in (False, True):
                with Episode(probe_task(n), con.cursor(), patch if noisy else None, functions, Limits()) as ep:
                    plans.append(
                        {
                            t: plan_shape(ep.gateway.cursor, SCAN_SQL.format(first=schema[t].column_names[0], table=t))
                            for t in TABLES
                        }
                    )
            out.append((table, *plans))
        return out
    finally:
        con.close()


def test_clean_and_noisy_episodes_scan_every_table_with_the_same_plan(synthetic_1000: Path, patches):
    differing = [
        (patched, t)
        for patched, clean, noisy in _plans(synthetic_1000, patches)
        for t in TABLES
        if clean[t] != noisy[t]
    ]
    assert not differing, f"plans differ between clean and noisy episodes (patched table, scanned table): {differing}"
    assert {patched for patched, _ in patches} == set(TABLES), "every probed table is patched at least once"


def test_the_old_layout_fails_the_same_check(synthetic_1000: Path, patches, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(episode_module, "SHADOW_TABLES", ())
    plans = _plans(synthetic_1000, patches[:10])
    assert all(clean[patched] != noisy[patched] for patched, clean, noisy in plans), (
        "without shadow views a clean twin reads the patched table directly, so its plan must differ"
    )
    assert all(clean[t] == noisy[t] for patched, clean, noisy in plans for t in TABLES if t != patched)
