"""Timing-channel probe: how often repeated scans from inside an episode single out the table its patch touches.

The attacker times `scans` full scans of each readable table through the episode's own tools, normalises each
table's time by that table's median over all probed episodes (a baseline any agent running many episodes can
learn; no label is used) and names the relatively slowest table as the patched one. Chance is 1 / tables read.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb

from pipeline.jsontree import without_key
from pipeline.noise.patch import Patch, TablePatch
from pipeline.release.records import TaskRecord
from pipeline.source.schema import load_schema

SCAN_SQL = "SELECT count(*), count(DISTINCT {first}) FROM {table}"
# Patched tables of the releases, small to mid-sized (the 1e6-row event tables take minutes to scan)
PROBE_TABLES = (
    "admissions",
    "diagnoses_icd",
    "drgcodes",
    "icustays",
    "microbiologyevents",
    "omr",
    "outputevents",
    "prescriptions",
    "services",
    "transfers",
)


@dataclass(frozen=True)
class Probe:
    """One episode's scan times: table -> median seconds over the scans, and the table its patch touches."""

    task_id: str
    patched: str
    noisy: bool
    seconds: dict[str, float]


def scan_seconds(run: Callable[[str], object], sql: str, scans: int) -> float:
    """Median wall time of `scans` runs of `sql` through `run` (the episode's sql tool or Python's sql())."""
    times = []
    for _ in range(scans):
        started = time.perf_counter()
        run(sql)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def probe_episode(run: Callable[[str], object], tables: dict[str, str], scans: int) -> dict[str, float]:
    """table -> median scan seconds; `tables` maps each table read to its first column (counted distinct, so
    every row of it is read)."""
    return {t: scan_seconds(run, SCAN_SQL.format(first=first, table=t), scans) for t, first in tables.items()}


def pick(seconds: dict[str, float], baseline: dict[str, float]) -> str:
    """The table the attacker names: the largest time relative to the table's baseline (ties: by name)."""
    return max(sorted(seconds), key=lambda t: seconds[t] / baseline[t])


def pick_rate(probes: Sequence[Probe], noisy: bool | None = None) -> tuple[float, float]:
    """(rate at which the pick is the patched table over the probes of one condition, or all when `noisy` is
    None; chance = 1 / tables read). Baselines are pooled over every probe, as an agent would pool them."""
    tables = sorted(probes[0].seconds)
    baseline = {t: statistics.median(p.seconds[t] for p in probes) for t in tables}
    chosen = [p for p in probes if noisy is None or p.noisy == noisy]
    hits = sum(pick(p.seconds, baseline) == p.patched for p in chosen)
    return hits / len(chosen), 1 / len(tables)


def binomial_upper(n: int, p: float, alpha: float = 0.001) -> int:
    """The smallest k with P(X >= k) <= alpha for X ~ Binomial(n, p): more hits than chance allows."""
    tail = 0.0
    for k in range(n, -1, -1):
        tail += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if tail > alpha:
            return k + 1
    return 0


def probe_patches(db, episodes: int, seed: int = 19) -> list[tuple[str, Patch]]:
    """`episodes` patches of `db` cycling over PROBE_TABLES, shuffled: (patched table, patch)."""
    rng = random.Random(seed)
    chosen = [PROBE_TABLES[n % len(PROBE_TABLES)] for n in range(episodes)]
    rng.shuffle(chosen)
    with duckdb.connect(str(db), read_only=True) as con:
        return [(table, probe_patch(con, table, rng)) for table in chosen]


def probe_task(n: int) -> TaskRecord:
    """A stand-in task for probe episodes (the tools never read it)."""
    return TaskRecord(
        task_id=f"t-timing-{n}", question="timing probe", scope="patient", intent="laboratory", split="test"
    )


def probe_patch(con: duckdb.DuckDBPyConnection, table: str, rng: random.Random) -> Patch:
    """A patch as the noise sub-types make them: 1-3 rows of `table` hidden, each re-added with its first numeric
    non-key column altered (7 in 10 patches) or not re-added at all (a missing record)."""
    spec = load_schema()[table]
    keys = list(spec.primary_key or spec.column_names)
    rows = con.execute(
        f"SELECT * FROM {table} ORDER BY hash(rowid, ?) LIMIT ?", [rng.randint(0, 10_000), rng.randint(1, 3)]
    ).fetchall()
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


def plan_shape(cursor: duckdb.DuckDBPyConnection, sql: str) -> str:
    """The physical plan DuckDB would run for `sql`, as JSON without its cardinality estimates: what work a scan
    does, not how many rows the optimizer guessed."""
    rows = cursor.execute(f"EXPLAIN (FORMAT json) {sql}").fetchall()
    return json.dumps(without_key(json.loads(rows[0][1]), "Estimated Cardinality"), sort_keys=True)
