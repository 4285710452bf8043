"""A question that names another concept (false_premise, unknown_concept) shows that concept's unit in its answer
format, as the clean question shows the asked one's (blind audit 40: a cerebral oximetry asked in mmHg)."""

from __future__ import annotations

import pytest

from pipeline.concepts import concept_sql
from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.slot_swap import concept_units, swapped_unit
from pipeline.noise.subtypes.unknown_concept import catalogue
from pipeline.noise.verify import verify_pair
from pipeline.release.records import records_of
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

pytestmark = pytest.mark.realdata
TEMPLATES = {t.id: t for t in load_templates()}
UNIT_TEMPLATES = ("lab_first_value_within_24h", "prescription_first_dose", "vital_max_in_stay")


@pytest.fixture(scope="module")
def swapped_pairs(source):
    tasks, _ = instantiate(source, [TEMPLATES[t] for t in UNIT_TEMPLATES], per_template=4, seed=3)
    found, tables = [], Tables(source)
    for name in ("false_premise", "unknown_concept"):
        for task in tasks:
            template = TEMPLATES[task.template_id]
            if subtypes()[name].applies(template):
                try:
                    found.append(verify_pair(source, tables, task, template, subtypes()[name], seed=1))
                except Rejected:
                    pass
    return found


def _usual_unit(con, slot: str, name: str) -> str | None:
    rule = concept_units()[slot]
    return scalar(
        con,
        f"SELECT {rule['unit']} FROM {rule['rows']} WHERE {concept_sql(rule['name'])} = {concept_sql('?')} "
        f"AND {rule['unit']} IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1",
        [name],
    )


def test_every_swapped_pair_shows_the_named_concepts_unit(source, swapped_pairs):
    subtypes_seen = {pair.subtype for pair in swapped_pairs}
    assert subtypes_seen == {"false_premise", "unknown_concept"}, subtypes_seen
    for pair in swapped_pairs:
        ((slot, name),) = pair.patch.slots.items()
        assert pair.clean.answer.unit is not None, pair.pair_id
        if pair.subtype == "false_premise":  # a real concept: its rows' usual unit
            assert pair.answer_unit == _usual_unit(source, slot, name), pair.pair_id
        else:  # a name the record lacks: the catalogue's unit for it
            units = {u for entry in catalogue().values() for n, u in entry.units.items() if n == name}
            assert pair.answer_unit in units, pair.pair_id


def test_the_noisy_task_record_carries_the_unit(swapped_pairs):
    pair = next(p for p in swapped_pairs if p.answer_unit != p.clean.answer.unit)
    template = TEMPLATES[pair.clean.template_id]
    tasks, _, _ = records_of(pair, "test", template.spec.answer)
    clean_task, noisy_task = tasks
    assert clean_task.answer_format.unit == pair.clean.answer.unit
    assert noisy_task.answer_format.unit == pair.answer_unit != clean_task.answer_format.unit


def test_a_concept_without_a_unit_is_rejected(source):
    template = TEMPLATES["lab_first_value_within_24h"]
    (task,), _ = instantiate(source, [template], per_template=1, seed=3)
    with pytest.raises(Rejected, match="no_unit_for_concept"):
        swapped_unit(
            source, template, task, {"lab_label": "Galactomannan Antigen"}, catalogue()["d_labitems.label"].units
        )
    assert swapped_unit(source, template, task, {"lab_label": "Procalcitonin"}, {"Procalcitonin": "ng/mL"}) == "ng/mL"


def test_a_fixed_answer_unit_is_not_replaced(source):
    template = TEMPLATES["prescription_duration_hours"]  # answers in hours whatever the drug
    (task,), _ = instantiate(source, [template], per_template=1, seed=3)
    assert swapped_unit(source, template, task, {"drug": "Tirzepatide"}, {"Tirzepatide": "mg"}) is None


def test_a_unit_the_question_names_is_not_replaced(source):
    template = TEMPLATES["mean_numeric_dose"]  # "... dosed in {{ dose_unit }}": the question fixes the unit
    (task,), _ = instantiate(source, [template], per_template=1, seed=3)
    assert swapped_unit(source, template, task, {"drug": "Cefiderocol"}, {"Cefiderocol": "g"}) is None
