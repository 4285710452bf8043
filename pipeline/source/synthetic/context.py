"""Per-chunk generation context: seeded RNG, vocabulary, running id counters and id pools."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .vocab import Vocab
from .writer import Text

ID_BASES = {
    "subject": 10_000_000, "hadm": 20_000_000, "stay": 30_000_000, "transfer": 30_000_000,
    "labevent": 1, "specimen": 1_000_000, "microevent": 1, "micro_specimen": 1_000_000,
    "pharmacy": 1_000_000, "orderid": 1_000_000,
}


@dataclass
class IdCounters:
    """Running counters so that ids are unique across chunks and depend only on generation order."""

    used: dict[str, int] = field(default_factory=dict)

    def take(self, name: str, n: int) -> np.ndarray:
        start = ID_BASES[name] + self.used.get(name, 0)
        self.used[name] = self.used.get(name, 0) + n
        return np.arange(start, start + n, dtype=np.int64)


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
