"""Timing-channel probe: how often repeated scans from inside an episode single out the table its patch touches.

The attacker times `scans` full scans of each readable table through the episode's own tools, normalises each
table's time by that table's median over all probed episodes (a baseline any agent running many episodes can
learn; no label is used) and names the relatively slowest table as the patched one. Chance is 1 / tables read.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

SCAN_SQL = "SELECT count(*), count(DISTINCT {first}) FROM {table}"


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
        tail += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
        if tail > alpha:
            return k + 1
    return 0
