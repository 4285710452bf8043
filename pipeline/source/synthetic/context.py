"""Per-chunk generation context: seeded RNG, vocabulary, running id counters and id pools."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .vocab import Vocab
from .writer import Text

# Identifiers as MIMIC-IV lays them out (see the real demo): subject, admission and stay ids scattered over
# their ranges (10,000,000-19,999,999, 20,000,000-29,999,999, 30,000,000-39,999,999) with gaps between
# consecutive ids; event ids (`labevent_id`, `microevent_id`) in per-patient blocks, consecutive within a
# patient in chart-time order (demo: 107,627 of 107,627 lab steps), with gaps between patients. Each kind:
# (first id, range width, the demo's mean gap, per patient).
ID_LAYOUT = {
    "subject": (10_000_000, 10_000_000, 400, 1),
    "hadm": (20_000_000, 10_000_000, 36_000, 3),
    "stay": (30_000_000, 10_000_000, 70_000, 2),
    "transfer": (30_000_000, 10_000_000, 20_000, 6),
    "specimen": (1, 100_000_000, 9_000, 150),
    "micro_specimen": (1, 100_000_000, 200_000, 10),
    "pharmacy": (1, 100_000_000, 6_500, 200),
    "orderid": (1, 10_000_000, 500, 250),
}
BLOCK_GAPS = {"labevent": 3_700, "microevent": 120}  # mean gap between two patients' blocks in the demo


def _hash(seed: int, kind: str, index: np.ndarray) -> np.ndarray:
    """A deterministic pseudo-random uint64 per (seed, kind, index): splitmix64 of the three mixed."""
    salt = int.from_bytes(kind.encode()[:8].ljust(8, b"\0"), "little")
    with np.errstate(over="ignore"):
        x = np.asarray(index, dtype=np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15 + salt) % 2**64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass
class IdCounters:
    """Identifiers unique across chunks, shaped like MIMIC-IV's and deterministic in the seed (the k-th id
    of a kind depends only on the seed and k, not on how patients are chunked)."""

    seed: int = 0
    patients: int = 1000
    used: dict[str, int] = field(default_factory=dict)

    def stride(self, name: str) -> int:
        """The mean gap: the demo's, narrowed so that this many patients' ids fit the kind's range."""
        _, width, gap, per_patient = ID_LAYOUT[name]
        return int(max(2, min(gap, width // (2 * per_patient * self.patients))))

    def take(self, name: str, n: int) -> np.ndarray:
        """The next `n` ids of a scattered kind: one per stride-wide slot, at a random place in the slot."""
        first, stride = ID_LAYOUT[name][0], self.stride(name)
        k = np.arange(self.used.get(name, 0), self.used.get(name, 0) + n, dtype=np.int64)
        self.used[name] = self.used.get(name, 0) + n
        return first + k * stride + (_hash(self.seed, name, k) % np.uint64(stride)).astype(np.int64)

    def take_blocks(self, name: str, subject_id: np.ndarray, charted: np.ndarray) -> np.ndarray:
        """Ids for rows grouped by patient: consecutive within a patient's run in the order the rows were charted
        (`charted`; ties keep the rows' order), a random gap before each run."""
        n = len(subject_id)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        starts = np.r_[True, subject_id[1:] != subject_id[:-1]]
        blocks = np.arange(self.used.get(f"{name}_blocks", 0), self.used.get(f"{name}_blocks", 0) + int(starts.sum()))
        gaps = 1 + (_hash(self.seed, name, blocks) % np.uint64(2 * BLOCK_GAPS[name])).astype(np.int64)
        step = np.ones(n, dtype=np.int64)
        step[starts] = gaps
        ids = self.used.get(name, 0) + np.cumsum(step)
        self.used[name], self.used[f"{name}_blocks"] = int(ids[-1]), int(blocks[-1]) + 1
        in_time = np.lexsort((np.arange(n), charted, np.cumsum(starts)))  # by run, then time, then row
        ordered = np.empty_like(ids)
        ordered[in_time] = ids  # the k-th row of a run in time takes the run's k-th id
        return ordered


def chunk_rng(seed: int, chunk_index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, chunk_index]))


@dataclass
class Context:
    """What every table generator needs for one chunk of patients."""

    rng: np.random.Generator
    vocab: Vocab
    ids: IdCounters
    provider_ids: list[str]
    caregiver_ids: np.ndarray

    def pick(self, section: str, key: str, n: int) -> Text:
        """`n` values of a weighted string vocabulary, as a dictionary-encoded column."""
        weighted = self.vocab.weighted(section, key)
        return Text(weighted.values, weighted.indices(self.rng, n))

    def providers(self, n: int, present: float = 1.0) -> Text:
        """Provider ids from the pool; a fraction `1 - present` of rows get NULL."""
        codes = self.rng.integers(0, len(self.provider_ids), n)
        codes = np.where(self.rng.random(n) < present, codes, len(self.provider_ids))
        return Text(self.provider_ids + [None], codes)

    def caregivers(self, n: int) -> np.ndarray:
        return self.caregiver_ids[self.rng.integers(0, len(self.caregiver_ids), n)]

    def histogram(self, section: str, key: str, n: int) -> np.ndarray:
        return self.vocab.weighted(section, key).numbers(self.rng, n).astype(np.int64)
