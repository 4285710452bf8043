"""Natural answers pass: for every template, an answer written the way its question asks (the value, the unit the
answer format names or none, the asked record fields only) matches the clean gold answer, on real and synthetic data."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pytest

from pipeline.templates.answers import AnswerValue, answer_format
from pipeline.templates.instantiate import instantiate
from pipeline.templates.matching import answer_mismatches
from pipeline.templates.registry import load_templates
from pipeline.templates.spec import AnswerType

TEMPLATES = load_templates()


def natural_value(value, spec):
    """How an analyst writes the value: numbers to the precision the tolerance allows, the rest as read."""
    if spec.type is AnswerType.number and spec.tolerance >= 0.01:
        return round(value, max(0, -math.floor(math.log10(spec.tolerance))))
    return value


def natural_answers(task, template) -> list[AnswerValue]:
    fmt = answer_format(template.spec.answer, task.answer)
    asked = {k: task.answer.records[k] for k in fmt.records}
    value = natural_value(task.answer.value, template.spec.answer)
    with_unit = AnswerValue(value=value, unit=fmt.unit, records=asked)
    return [with_unit, with_unit.model_copy(update={"unit": None})]


def _check(db: Path) -> dict[str, list[str]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        tasks, _ = instantiate(con, TEMPLATES, per_template=2, seed=3)
    finally:
        con.close()
    by_id = {t.id: t for t in TEMPLATES}
    failures = {}
    for task in tasks:
        template = by_id[task.template_id]
        for answer in natural_answers(task, template):
            reasons = answer_mismatches(task.answer, answer, template.spec.answer)
            if reasons:
                failures[f"{task.task_id} {answer.model_dump()}"] = reasons
    assert tasks, f"{db}: no task instantiated"
    return failures


def test_natural_answers_pass_on_the_synthetic_source(synthetic_db: Path):
    assert _check(synthetic_db) == {}


@pytest.mark.slow
def test_natural_answers_pass_on_the_synthetic_default(synthetic_1000: Path):
    assert _check(synthetic_1000) == {}


def test_natural_answers_pass_on_the_real_demo(demo_db: Path):
    assert _check(demo_db) == {}


@pytest.mark.parametrize("unit", ["mmol/L", "furlongs"])
def test_a_unit_of_another_dimension_is_refused_with_its_reason(unit):
    template = next(t for t in TEMPLATES if t.id == "lab_last_value_in_admission")
    expected = AnswerValue(value=140.0, unit="mg/dL", records={"charttime": "2150-01-01 10:00:00", "itemid": 1})
    reasons = answer_mismatches(expected, AnswerValue(value=140.0, unit=unit), template.spec.answer)
    assert reasons and unit in reasons[0]


def _between(given, readings, **spec) -> bool:
    from pipeline.templates.matching import between_readings
    from pipeline.templates.spec import Answer

    answer = Answer(**spec)
    return between_readings(AnswerValue(value=given), [AnswerValue(value=r) for r in readings], answer)


def test_a_careless_answer_between_two_accepted_readings_is_recognised():
    """Blind audit 32: a population mean counting both copies, 87.18, between the one-copy readings 87.15, 87.23."""
    number = {"type": AnswerType.number, "tolerance": 0.01}
    assert _between(87.18, [87.2, 87.23, 87.15], **number)
    assert _between(87.24, [87.2, 87.23, 87.15], **number)  # within the tolerance of the range
    assert not _between(87.3, [87.2, 87.23, 87.15], **number) and not _between(87.18, [87.2], **number)
    assert not _between(87.18, [None, 87.2], **number)  # an abstention spans no range
    ordered = {"type": AnswerType.list, "ordered": True}
    accepted = [["STAPH", "YEAST", "STENO"], ["YEAST", "STAPH", "STENO"], ["STAPH", "YEAST", "ENTEROBACTER"]]
    assert _between(["yeast", "Staph", "Enterobacter"], accepted, **ordered)  # each place held by some reading
    assert not _between(["YEAST", "ENTEROBACTER", "STAPH"], accepted, **ordered)
    unordered = {"type": AnswerType.list}
    assert _between(["a", "b", "d"], [["a", "b", "c"], ["a", "d"]], **unordered)
    assert not _between(["b", "c"], [["a", "b", "c"], ["a", "d"]], **unordered)  # lacks what every reading holds
    assert not _between(["a", "e"], [["a", "b", "c"], ["a", "d"]], **unordered)  # holds what no reading holds
