"""Microbiology: specimen tests during admissions, some growing an organism tested against antibiotics."""

from __future__ import annotations

from functools import cache

import numpy as np

from .cohort import Admissions
from .context import Context
from .sampling import DAY, MINUTE, Weighted, expand, poisson_counts, rank_in_group, uniform_times
from .vocab import Vocab
from .writer import Text, times


def write_microbiology(ctx: Context, writer, adm: Admissions) -> None:
    rng, vocab = ctx.rng, ctx.vocab
    tests = poisson_counts(rng, vocab.value("microbiology", "tests_per_admission_day") * adm.days)
    admission = expand(tests)
    test = Weighted.of(vocab.value("microbiology", "test"))
    test_pick = test.indices(rng, len(admission))
    organisms = organism_table(vocab)
    grows = rng.random(len(admission)) < organisms["fraction"][test_pick]
    org = _grown_organisms(rng, organisms, test_pick, grows)
    antibiotics = np.where(grows, ctx.histogram("microbiology", "antibiotics_per_organism", len(admission)), 0)
    row_test = expand(np.maximum(antibiotics, 1))
    has_ab = antibiotics[row_test] > 0
    drawn = uniform_times(rng, admission, adm.admit, adm.disch)
    stored = drawn + ((1 + rng.random(len(admission)) * 3) * DAY).astype(np.int64)
    writer.insert(
        "microbiologyevents",
        {
            "microevent_id": ctx.ids.take_blocks("microevent", adm.subject_id[admission][row_test], drawn[row_test]),
            "subject_id": adm.subject_id[admission][row_test],
            "hadm_id": adm.hadm_id[admission][row_test],
            "micro_specimen_id": ctx.ids.take("micro_specimen", len(admission))[row_test],
            "order_provider_id": ctx.providers(len(row_test), present=0.2),
            "chartdate": times(drawn - drawn % DAY)[row_test],
            "charttime": times(drawn)[row_test],
            "spec_itemid": np.asarray(test.column(0), dtype=np.int64)[test_pick][row_test],
            "spec_type_desc": Text(test.column(1), test_pick[row_test]),
            "test_seq": np.ones(len(row_test), np.int64),
            "storedate": times(stored - stored % DAY)[row_test],
            "storetime": times(stored - stored % MINUTE)[row_test],
            "test_itemid": np.asarray(test.column(2), dtype=float)[test_pick][row_test],
            "test_name": Text(test.column(3), test_pick[row_test]),
            **_organism_columns(ctx, organisms["names"], org[row_test], row_test, has_ab),
        },
    )


@cache
def organism_table(vocab: Vocab) -> dict:
    """Per demo test (row of the test distribution): growth share and organism distribution over one list."""
    tests = Weighted.of(vocab.value("microbiology", "test")).column(2)
    by_test = vocab.value("microbiology", "organism_by_test")
    names = sorted({tuple(o) for t in by_test.values() for o in t["organisms"]["values"]})
    position = {name: i for i, name in enumerate(names)}
    fraction, weights = [], []
    for test_itemid in tests:
        entry = by_test.get(str(test_itemid), {"fraction": 0.0, "organisms": {"values": [], "p": []}})
        fraction.append(entry["fraction"])
        organisms = entry["organisms"]
        weights.append(Weighted([position[tuple(o)] for o in organisms["values"]], organisms["p"]))
    return {"names": names, "fraction": np.asarray(fraction), "weights": weights}


def _grown_organisms(rng, organisms: dict, test_pick: np.ndarray, grows: np.ndarray) -> np.ndarray:
    """Organism position per test (len(names) where nothing grew), drawn from that test's demo organisms."""
    org = np.full(len(test_pick), len(organisms["names"]), dtype=np.int64)
    for test in np.unique(test_pick[grows]):
        rows = np.flatnonzero(grows & (test_pick == test))
        org[rows] = organisms["weights"][test].numbers(rng, len(rows))
    return org


def _organism_columns(ctx: Context, names: list, org: np.ndarray, row_test: np.ndarray, has_ab: np.ndarray) -> dict:
    """Organism columns, antibiotic with dilution and interpretation (per row), or a comment where none grew."""
    rng, n = ctx.rng, len(org)
    antibiotic = Weighted.of(ctx.vocab.value("microbiology", "antibiotic"))
    ab = np.where(has_ab, _distinct_antibiotics(rng, antibiotic, row_test), len(antibiotic.values))
    dilution = Weighted.of(ctx.vocab.value("microbiology", "dilution_value"))
    comparison = ctx.pick("microbiology", "dilution_comparison", n)
    value = np.where(has_ab, dilution.numbers(rng, n), np.nan)
    comment = ctx.pick("microbiology", "no_growth_comment", n)
    return {
        "org_itemid": np.r_[np.asarray([o[0] for o in names], dtype=float), np.nan][org],
        "org_name": Text([o[1] for o in names] + [None], org),
        "isolate_num": np.where(org < len(names), 1.0, np.nan),
        "ab_itemid": np.r_[np.asarray(antibiotic.column(0), dtype=float), np.nan][ab],
        "ab_name": Text(antibiotic.column(1) + [None], ab),
        "dilution_comparison": _masked(comparison, has_ab),
        "dilution_value": value,
        "interpretation": _masked(ctx.pick("microbiology", "interpretation", n), has_ab),
        "comments": _masked(comment, org == len(names)),
    }


def _distinct_antibiotics(rng, antibiotic: Weighted, row_test: np.ndarray) -> np.ndarray:
    """A different antibiotic on each row of one organism's panel (walks the list from a random start)."""
    start = rng.integers(0, len(antibiotic.values), len(row_test))
    first_row = np.r_[0, np.flatnonzero(np.diff(row_test)) + 1]
    start = np.repeat(start[first_row], np.diff(np.r_[first_row, len(row_test)]))
    return (start + rank_in_group(row_test)) % len(antibiotic.values)


def _masked(column: Text, keep: np.ndarray) -> Text:
    return Text(column.values + [None], np.where(keep, column.codes, len(column.values)))
