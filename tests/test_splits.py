"""Train/test splits: balanced over scope x level, patient-disjoint, and no more patients held out than needed."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.noise.base import LEVELS
from pipeline.release.splits import assign_splits


def pair(pair_id: str, level: str, subject: int | None):
    scope = "population" if subject is None else "patient"
    clean = SimpleNamespace(scope=scope, slots={} if subject is None else {"subject_id": subject})
    return SimpleNamespace(pair_id=pair_id, level=level, clean=clean)


def test_a_thin_population_cell_holds_out_few_patients():
    """One population pair per level: test takes one pair per cell, and only as many patients as give one patient
    pair per level are held out, so no patient pair is dropped (half the patients were held out before)."""
    pairs = [pair(f"pop-{level}", level, None) for level in LEVELS]
    pairs += [pair(f"p{s}-{level}", level, s) for s in range(40) for level in LEVELS]
    split, report = assign_splits(pairs, seed=0, test_size=1008)
    assert report.per_cell == 1 and report.test == 6
    assert report.test_patients == 1 and report.dropped_test_patients_unused == 0
    assert report.train == len(pairs) - 6 and sum(v == "train" for v in split.values()) == report.train
    held = {p.clean.slots["subject_id"] for p in pairs if split[p.pair_id] in {"test", "dropped"} and p.clean.slots}
    trained = {p.clean.slots["subject_id"] for p in pairs if split[p.pair_id] == "train" and p.clean.slots}
    assert held and not held & trained


def test_ample_cells_fill_the_test_size():
    pairs = [pair(f"pop{i}-{level}", level, None) for i in range(30) for level in LEVELS]
    pairs += [pair(f"p{s}-{level}", level, s) for s in range(60) for level in LEVELS]
    split, report = assign_splits(pairs, seed=0, test_size=120)
    assert report.per_cell == 20 and report.test == 120 and report.test_patients == 20


def test_patients_of_a_level_still_short_are_held_out_first():
    """The only patients with a value pair come late in the seeded order: patients who add nothing to a short
    level are passed over, so the value cell still fills and nobody is held out for nothing."""
    pairs = [pair(f"pop-{level}", level, None) for level in LEVELS]
    pairs += [pair(f"p{s}-query", "query", s) for s in range(30)]
    pairs += [pair(f"p{s}-record", "record", s) for s in range(30)]
    pairs += [pair("p99-value", "value", 99)]
    split, report = assign_splits(pairs, seed=0, test_size=1008)
    assert report.per_cell == 1 and report.test == 6 and split["p99-value"] == "test"
    assert report.test_patients <= 3 and report.dropped_test_patients_unused <= 2
