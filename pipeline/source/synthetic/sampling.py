"""Vectorised sampling primitives: weighted choices, quantile tables, group expansion and ranks."""

from __future__ import annotations

import numpy as np

NULL_TIME = np.iinfo(np.int64).min  # becomes NaT / SQL NULL when written
MINUTE, HOUR, DAY = 60, 3600, 86400
QUANTILE_POINTS = [0.0, 0.01, 0.025, 0.05] + [round(0.1 * k, 1) for k in range(1, 10)] + [0.95, 0.975, 0.99, 1.0]
_POINTS = np.asarray(QUANTILE_POINTS)


class Weighted:
    """A categorical distribution over `values` (kept as given) with probabilities `p`."""

    def __init__(self, values: list, p: list[float]):
        self.values = values
        self._cdf = np.cumsum(np.asarray(p, dtype=float))
        self._cdf /= self._cdf[-1] if len(self._cdf) else 1.0

    @classmethod
    def of(cls, spec: dict) -> Weighted:
        return cls(spec["values"], spec["p"])

    def indices(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` sampled positions into `values`."""
        return np.minimum(np.searchsorted(self._cdf, rng.random(n), side="right"), len(self._cdf) - 1)

    def numbers(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` sampled values, for numeric `values`."""
        return np.asarray(self.values)[self.indices(rng, n)]

    def column(self, position: int) -> list:
        """One field of every value, for tuple-valued distributions."""
        return [v[position] for v in self.values]


class QuantileTable:
    """Per-row inverse CDFs: row i holds the demo quantiles of item i (NaN rows sample NaN)."""

    def __init__(self, rows: list[list[float] | None]):
        self.table = np.full((len(rows), len(_POINTS)), np.nan)
        for i, row in enumerate(rows):
            if row is not None:
                self.table[i] = [np.nan if v is None else v for v in row]

    def sample(self, rng: np.random.Generator, items: np.ndarray) -> np.ndarray:
        """One value per entry of `items` (row numbers), by linear interpolation between quantiles."""
        u = rng.random(len(items))
        upper = np.clip(np.searchsorted(_POINTS, u, side="right"), 1, len(_POINTS) - 1)
        frac = (u - _POINTS[upper - 1]) / (_POINTS[upper] - _POINTS[upper - 1])
        low, high = self.table[items, upper - 1], self.table[items, upper]
        return low + frac * (high - low)


def quantiles(values: list[float]) -> QuantileTable:
    return QuantileTable([values])


def sample_one(table: QuantileTable, rng: np.random.Generator, n: int) -> np.ndarray:
    return table.sample(rng, np.zeros(n, dtype=np.int64))


def expand(counts: np.ndarray) -> np.ndarray:
    """Parent row number of each child, for `counts[i]` children of parent i."""
    return np.repeat(np.arange(len(counts)), counts)


def rank_in_group(parent: np.ndarray) -> np.ndarray:
    """0-based position of each row within its run of equal `parent` values (rows grouped by parent)."""
    if len(parent) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, parent[1:] != parent[:-1]])
    lengths = np.diff(np.r_[starts, len(parent)])
    return np.arange(len(parent)) - np.repeat(starts, lengths)


def stratified_times(rng, counts: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`counts[i]` times spread evenly (one per equal slice, jittered) over [start[i], end[i]].

    Returns (parent row of each time, time in seconds floored to the minute, clipped to the span).
    """
    parent = expand(counts)
    slot = rank_in_group(parent)
    n = counts[parent]
    span = (end - start)[parent]
    offset = (slot + rng.random(len(parent))) / np.maximum(n, 1) * span
    times = start[parent] + offset.astype(np.int64)
    times = np.maximum(times - times % MINUTE, start[parent])
    return parent, np.minimum(times, end[parent])


def uniform_times(rng, parent: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """One time uniformly inside [start, end] of each row's parent, floored to the minute but not before start."""
    t = start[parent] + (rng.random(len(parent)) * (end - start)[parent]).astype(np.int64)
    return np.maximum(t - t % MINUTE, start[parent])


def poisson_counts(rng, rate: np.ndarray) -> np.ndarray:
    return rng.poisson(np.maximum(rate, 0.0)).astype(np.int64)


def round_values(values: np.ndarray, decimals: np.ndarray) -> np.ndarray:
    """Round each value to its item's number of decimals."""
    scale = 10.0**decimals
    return np.round(values * scale) / scale


def decimals_for(quantile_rows: np.ndarray) -> np.ndarray:
    """0 decimals for items whose demo quantiles are whole numbers, else 1 (>= 10) or 2."""
    inner = quantile_rows[:, 4:-4]
    whole = np.all(np.isnan(inner) | (inner == np.round(inner)), axis=1)
    big = np.nanmedian(np.where(np.isnan(inner), 0, np.abs(inner)), axis=1) >= 10
    return np.where(whole, 0, np.where(big, 1, 2))


def keep_first_per_key(*keys: np.ndarray) -> np.ndarray:
    """Mask keeping the first row of every distinct key tuple (order of first appearance preserved)."""
    if len(keys[0]) == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort(keys[::-1])
    sorted_keys = [k[order] for k in keys]
    dup = np.zeros(len(order), dtype=bool)
    dup[1:] = np.logical_and.reduce([k[1:] == k[:-1] for k in sorted_keys])
    keep = np.ones(len(order), dtype=bool)
    keep[order[dup]] = False
    return keep
