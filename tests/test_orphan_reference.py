"""orphan_reference on real demo rows: the tables that also record the hidden encounter lose it too."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import overlay
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}
ORPHAN = subtypes()["orphan_reference"]


def test_a_hidden_admission_leaves_no_transfer_icu_stay_or_service(source):
    # a first-24-hour question is answerable wherever the admit order places the admission (recoverable); the
    # hours from admission to the ICU move with it
    template = TEMPLATES["procedure_day_of_admission"]
    tasks = instantiate(source, [template], per_template=14, seed=7)[0]
    pairs = []
    for task in tasks:  # a pair whose answer holds at every likely admission time is rejected as recoverable
        try:
            pairs.append(verify_pair(source, Tables(source), task, template, ORPHAN, seed=0))
        except Rejected as exc:
            assert exc.reason.startswith("recoverable_"), exc.reason
    assert pairs
    for pair in pairs:
        hadm_id = pair.clean.slots["hadm_id"]
        assert scalar(source, "SELECT count(*) FROM transfers WHERE hadm_id = ?", [hadm_id]) > 0
        with overlay(source, pair.patch):
            for table in ("admissions", "transfers", "icustays", "services"):
                assert scalar(source, f"SELECT count(*) FROM {table} WHERE hadm_id = ?", [hadm_id]) == 0, table
            assert scalar(source, "SELECT count(*) FROM procedures_icd WHERE hadm_id = ?", [hadm_id]) > 0
        assert pair.expected.value is None and pair.naive_answer.value is None  # no admission, no day of it


def test_a_question_reading_the_sibling_table_is_rejected(source):
    template = TEMPLATES["lab_first_value_within_24h"]
    task = instantiate(source, [template], per_template=1, seed=7)[0][0]
    reads_transfers = f"SELECT g.* FROM ({task.gold_sql}) g WHERE EXISTS (SELECT 1 FROM transfers t WHERE t.hadm_id = {task.slots['hadm_id']})"
    with pytest.raises(Rejected, match="question_reads_sibling"):  # transfers record the admission too
        ORPHAN.make(source, task.model_copy(update={"gold_sql": reads_transfers}), template, np.random.default_rng(0))
