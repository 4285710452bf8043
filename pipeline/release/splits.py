"""Train/test splits: patient-disjoint for patient-level pairs; a test split balanced over scope x level."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict

from pydantic import BaseModel, ConfigDict

from pipeline.noise.base import LEVELS
from pipeline.noise.verify import NoisePair

SCOPES = ("patient", "population")
PAPER_TEST_SIZE = 1008  # 504 per scope, 336 per level: the reference benchmark's test split
MAX_TEST_PATIENT_SHARE = 0.5  # at most this share of patients is held out for test


class SplitReport(BaseModel):
    """How the pairs were split, and what was left out to keep the split honest."""

    model_config = ConfigDict(extra="forbid")
    per_cell: int
    test: int
    train: int
    dropped_test_patients_unused: int  # patient-level pairs of held-out patients not drawn into test
    test_patients: int


def subject_of(pair: NoisePair) -> int | None:
    return pair.clean.slots.get("subject_id") if pair.clean.scope == "patient" else None


def _order(key: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def _hold_out_patients(pairs: list[NoisePair], per_cell: int, seed: int) -> set[int]:
    """Patients, in a seeded order, until every patient-level cell could fill `per_cell` test pairs; a patient
    with no pair of a level still short is not held out (its pairs would only be dropped)."""
    by_patient: dict[int, list[NoisePair]] = defaultdict(list)
    for pair in pairs:
        if (subject := subject_of(pair)) is not None:
            by_patient[subject].append(pair)
    held: set[int] = set()
    counts: Counter[str] = Counter()
    for subject in sorted(by_patient, key=lambda s: _order(str(s), seed)):
        short = {level for level in LEVELS if counts[level] < per_cell}
        if not short or len(held) >= MAX_TEST_PATIENT_SHARE * len(by_patient):
            break
        if not any(p.level in short for p in by_patient[subject]):
            continue
        held.add(subject)
        counts.update(p.level for p in by_patient[subject])
    return held


def assign_splits(
    pairs: list[NoisePair], seed: int, test_size: int = PAPER_TEST_SIZE
) -> tuple[dict[str, str], SplitReport]:
    """{pair_id: "train" | "test" | "dropped"} and a report. Test takes the same number of pairs from each
    scope x level cell (test_size / 6 when there are enough, otherwise the largest equal number). Patients are
    held out only until their cells could match the thinnest population cell: a small build (demo34: 18 test pairs,
    55 dropped) no longer drops most of its held-out patients' pairs."""
    target = test_size // (len(SCOPES) * len(LEVELS))
    population = Counter(p.level for p in pairs if subject_of(p) is None)
    target = min([target] + [population[level] for level in LEVELS])  # no cell takes more than the thinnest
    held = _hold_out_patients(pairs, target, seed)  # so no more patients are held out (their other pairs dropped)
    pools: dict[tuple[str, str], list[NoisePair]] = defaultdict(list)
    for pair in pairs:
        subject = subject_of(pair)
        if subject is None or subject in held:
            pools[(pair.clean.scope, pair.level)].append(pair)
    per_cell = min([target] + [len(pools[(s, lv)]) for s in SCOPES for lv in LEVELS])
    test = {
        p.pair_id for cell in pools.values() for p in sorted(cell, key=lambda p: _order(p.pair_id, seed))[:per_cell]
    }
    split = {}
    for pair in pairs:
        if pair.pair_id in test:
            split[pair.pair_id] = "test"
        elif subject_of(pair) in held:
            split[pair.pair_id] = "dropped"  # its patient is a test patient: keeping it in train would leak
        else:
            split[pair.pair_id] = "train"
    counts = Counter(split.values())
    report = SplitReport(
        per_cell=per_cell,
        test=counts["test"],
        train=counts["train"],
        dropped_test_patients_unused=counts["dropped"],
        test_patients=len(held),
    )
    return split, report
