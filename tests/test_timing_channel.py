"""The timing channel: repeated scans from inside an episode must not single out the table its patch touches.

32 noisy episodes (each patch hides and alters rows of one table, as the noise sub-types do) and their 32 clean
twins time full scans of 10 readable tables through the sql tool; the attacker of pipeline.env.timing names the
relatively slowest table. The pick may not beat chance (1/10) beyond the binomial tail at alpha = 0.001 (at most
9 hits of 32). The same attacker on episodes that read untouched tables directly (the pre-mitigation layout)
must clear that bound, so the probe has the power to fail.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import pipeline.env.episode as episode_module
from pipeline.env.episode import Episode
from pipeline.env.gateway import Gateway, Limits, open_locked
from pipeline.env.timing import Probe, binomial_upper, pick_rate, probe_episode
from pipeline.noise.patch import Patch, TablePatch
from pipeline.release.records import TaskRecord
from pipeline.source.schema import load_schema

# Patched tables of the releases, small to mid-sized (the 1e6-row event tables would take minutes to scan here)
TABLES = ["admissions", "diagnoses_icd", "drgcodes", "icustays", "microbiologyevents", "omr", "outputevents",
          "prescriptions", "services", "transfers"]
EPISODES, SCANS, ALPHA = 32, 3, 0.001


def _patch(con, table: str, rng: random.Random) -> Patch:
    """Hide 1-3 rows of `table`; re-add an altered copy of each as an alteration sub-type would (the first
    numeric-looking column shifted), or not (a missing record)."""
    spec = load_schema()[table]
    keys = list(spec.primary_key or spec.column_names)
    rows = con.execute(f"SELECT * FROM {table} ORDER BY hash(rowid, ?) LIMIT ?",
                       [rng.randint(0, 10_000), rng.randint(1, 3)]).fetchall()
    records = [dict(zip(spec.column_names, row, strict=True)) for row in rows]
    hide = [{k: r[k] for k in keys} for r in records]
    add = [] if rng.random() < 0.3 else [_altered(r, keys) for r in records]
    return Patch(tables={table: TablePatch(key_columns=keys, hide=hide, add=add)})


def _altered(row: dict, keys: list[str]) -> dict:
    out = dict(row)
    for name, value in row.items():
        if name not in keys and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value * 3 + 1
            break
    return out


def _task(n: int) -> TaskRecord:
    return TaskRecord(task_id=f"t-timing-{n}", question="timing probe", scope="patient", intent="laboratory",
                      split="test")


def _probes(db: Path, patches: list[tuple[str, Patch]]) -> list[Probe]:
    con = open_locked(db, Limits())
    try:
        functions, schema = Gateway.functions_of(con), load_schema()
        tables = {t: schema[t].column_names[0] for t in TABLES}
        probes = []
        for n, (table, patch) in enumerate(patches):
            for noisy in (False, True):
                with Episode(_task(n), con.cursor(), patch if noisy else None, functions, Limits()) as ep:
                    run = lambda sql, ep=ep: ep.call("sql", {"query": sql})  # noqa: E731 - the agent's own tool
                    probes.append(Probe(ep.task.task_id, table, noisy, probe_episode(run, tables, SCANS)))
        return probes
    finally:
        con.close()


@pytest.fixture(scope="module")
def patches(synthetic_1000: Path) -> list[tuple[str, Patch]]:
    import duckdb

    rng = random.Random(19)
    with duckdb.connect(str(synthetic_1000), read_only=True) as con:
        chosen = [TABLES[n % len(TABLES)] for n in range(EPISODES)]
        rng.shuffle(chosen)
        return [(table, _patch(con, table, rng)) for table in chosen]


def _hits(probes: list[Probe], noisy: bool) -> tuple[int, int, int]:
    """(hits, episodes, bound) of the attacker in one condition, baselines pooled over both."""
    rate, chance = pick_rate(probes, noisy)
    n = sum(p.noisy == noisy for p in probes)
    return round(rate * n), n, binomial_upper(n, chance, ALPHA)


def test_the_patched_table_is_not_picked_out_by_scan_time(synthetic_1000: Path, patches):
    probes = _probes(synthetic_1000, patches)
    for noisy in (True, False):
        hits, n, bound = _hits(probes, noisy)
        assert n == EPISODES and hits < bound, (f"{'noisy' if noisy else 'clean'}: the slowest table was the patched one "
                                               f"in {hits}/{n} episodes; chance 1/{len(TABLES)} allows < {bound}")


def test_the_probe_finds_the_channel_when_untouched_tables_are_read_directly(synthetic_1000: Path, patches,
                                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(episode_module, "SHADOW_TABLES", ())
    hits, n, bound = _hits(_probes(synthetic_1000, patches[:16]), noisy=True)
    assert hits >= bound, f"without shadow views the probe picked the patched table in only {hits}/{n} episodes"
