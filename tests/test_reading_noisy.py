"""A noisy question reads back to its noisy slots: verified pairs of each sub-type that rewrites the question, on
the synthetic source and (one test for all) on the demo (a release of one task per template need not publish each
of them; tests/test_reading.py reads the releases)."""

from __future__ import annotations

import functools

import pytest
from aggregate import assert_all_pass

from pipeline.agents.reading import checkout_reader
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate, typed_slots
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

PATCHED_PAIRS = [
    ("nonexistent_entity", "lab_last_value_in_admission"),
    ("false_premise", "prescription_first_dose"),
    ("unknown_concept", "lab_first_value_within_24h"),
    ("out_of_window", "lab_last_value_in_window"),
]


def test_every_question_level_subtype_is_covered():
    assert {s for s, _ in PATCHED_PAIRS} == {n for n, s in subtypes().items() if s.level == "query"}


def reads_back_to_its_noisy_slots(source, subtype: str, template_id: str) -> None:
    template = next(t for t in load_templates() if t.id == template_id)
    pairs = []
    for task in instantiate(source, [template], per_template=4, seed=0)[0]:
        try:
            pairs.append(verify_pair(source, Tables(source), task, template, subtypes()[subtype], seed=0))
        except Rejected:
            continue
    assert pairs, f"no verified {subtype} pair on {template_id}"
    for pair in pairs:
        assert pair.noisy_question != pair.clean.question
        reading = checkout_reader().read(pair.noisy_question)
        assert reading.template.id == template_id
        assert typed_slots(template, reading.slots) == typed_slots(template, pair.noisy_slots)


@pytest.mark.parametrize("subtype, template_id", PATCHED_PAIRS)
def test_a_noisy_question_reads_back_to_its_noisy_slots(synthetic_source, subtype: str, template_id: str):
    reads_back_to_its_noisy_slots(synthetic_source, subtype, template_id)


def test_noisy_questions_of_the_demo_read_back_to_their_noisy_slots(source):
    assert_all_pass(
        (f"{subtype} on {template_id}", functools.partial(reads_back_to_its_noisy_slots, source, subtype, template_id))
        for subtype, template_id in PATCHED_PAIRS
    )
