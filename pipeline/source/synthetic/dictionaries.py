"""Dictionary tables (d_*) from package data, and the provider and caregiver id pools."""

from __future__ import annotations

import numpy as np

from .vocab import Vocab

PROVIDER_ALPHABET = np.array(list("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
POOL_SEED = 20_220_101  # pools depend on the patient count only, never on the run's seed


def pool_size(patients: int, floor: int, cap: int) -> int:
    return int(min(cap, max(floor, patients)))


def provider_ids(patients: int) -> list[str]:
    """Distinct MIMIC-style provider ids ('P' + 5 base-36 characters)."""
    n = pool_size(patients, 500, 40_000)
    numbers = np.random.default_rng(POOL_SEED).choice(36**5, size=n, replace=False)
    digits = [PROVIDER_ALPHABET[(numbers // 36**k) % 36] for k in range(4, -1, -1)]
    return sorted("P" + "".join(chars) for chars in zip(*digits))


def caregiver_ids(patients: int) -> np.ndarray:
    n = pool_size(patients, 300, 15_000)
    return np.sort(np.random.default_rng(POOL_SEED + 1).choice(np.arange(1_000, 100_000), size=n, replace=False))


def write_dictionaries(writer, vocab: Vocab, providers: list[str], caregivers: np.ndarray) -> None:
    for table, columns in sorted(vocab.dictionaries.items()):
        wanted = writer.schema[table].column_names
        writer.insert(table, {c: _column(columns[c]) for c in wanted if c in columns})
    writer.insert("provider", {"provider_id": np.asarray(providers)})
    writer.insert("caregiver", {"caregiver_id": caregivers})


def _column(values: list) -> np.ndarray:
    if all(v is None or isinstance(v, (int, float)) for v in values):
        return np.asarray([np.nan if v is None else v for v in values], dtype=float)
    return np.asarray([None if v is None else str(v) for v in values], dtype=object)
