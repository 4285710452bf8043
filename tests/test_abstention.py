"""Abstention validity from evidence: hand-written careful and lazy traces over real demo labels, on the demo DB."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.env.abstention import coverage, references
from pipeline.env.records import QueryRecord, ToolCall, ToolResult, Trajectory
from pipeline.env.verifier import registry_template, verify
from pipeline.noise.base import subtypes
from pipeline.release.records import LabelRecord
from pipeline.templates.answers import AnswerValue

FIXTURES = Path(__file__).parent / "fixtures" / "abstention"
LABELS = yaml.safe_load((FIXTURES / "labels.yaml").read_text())
TRACES = yaml.safe_load((FIXTURES / "traces.yaml").read_text())
NULL = AnswerValue(value=None)


def label(name: str) -> LabelRecord:
    """A fixture label completed with the fields abstention validity does not read."""
    raw = dict(LABELS[name])
    expected = AnswerValue(**raw.pop("expected", {"value": None}))
    template = registry_template(raw["template_id"])
    return LabelRecord(
        **raw,
        pair_id="p-fixture",
        split="test",
        template_version=template.spec.version,
        intent=template.spec.intent,
        subtype_version=1,
        gold_sql="SELECT 1",
        reference_sql="SELECT 1",
        expected=expected,
        naive_answer=None,
        trap=None,
    )


def trace(task_id: str, queries: list[dict], answer: AnswerValue = NULL) -> Trajectory:
    calls = [
        ToolCall(
            tool=q.get("via", "sql"),
            arguments={"query": q["sql"]},
            result=ToolResult(ok=q.get("ok", True), content="..."),
            queries=[QueryRecord(sql=q["sql"], via=q.get("via", "sql"), ok=q.get("ok", True))],
        )
        for q in queries
    ]
    return Trajectory(task_id=task_id, agent="hand", question="?", calls=calls, answer=answer)


def test_the_fixtures_cover_every_noise_subtype_with_careful_and_lazy_traces():
    covered: dict[str, set[bool]] = {}
    for t in TRACES:
        covered.setdefault(LABELS[t["label"]]["subtype"], set()).add(t["valid"])
    assert sorted(covered) == sorted(subtypes())
    assert all(kinds == {True, False} for kinds in covered.values()), covered
    assert len(TRACES) >= 30


@pytest.mark.parametrize("case", TRACES, ids=[f"{t['label']}: {t['name']}" for t in TRACES])
def test_abstention_is_valid_exactly_when_the_trace_covered_the_evidence(case, source):
    lab = label(case["label"])
    verdict = verify(
        lab, trace(lab.task_id, case["queries"]), template=registry_template(lab.template_id), source=source
    )
    assert verdict.abstention_valid is case["valid"], verdict.reasons
    assert verdict.passed is case["valid"] and verdict.answer_match is True
    if not case["valid"]:
        assert verdict.reasons[0].startswith("abstention not supported by the trace: none of"), verdict.reasons


def test_a_wrong_abstention_on_a_clean_task_says_whether_it_looked(source):
    lab, template = label("urea_clean"), registry_template("lab_last_value_in_admission")
    looked = [{"sql": "SELECT valuenum FROM labevents WHERE hadm_id = 22942076 AND itemid = 51006"}]
    careful = verify(lab, trace(lab.task_id, looked), template=template, source=source)
    assert not careful.passed and careful.abstention_valid is True
    assert careful.reasons[0].startswith("answered NULL, but the record supports an answer: expected 22.0")
    assert careful.reasons[1].startswith("the trace covered the evidence: statement 1 (sql) covered evidence rows")
    lazy = verify(lab, trace(lab.task_id, []), template=template, source=source)
    assert not lazy.passed and lazy.abstention_valid is False
    assert lazy.reasons[1].startswith("the trace did not cover the evidence: none of 0 successful statement(s)")


def test_an_answer_on_a_noisy_task_fails_even_after_a_careful_look(source):
    lab = label("urea_implausible")
    got = AnswerValue(value=220.0, unit="mg/dL")
    looked = [{"sql": "SELECT valuenum FROM labevents WHERE hadm_id = 22942076 AND itemid = 51006"}]
    verdict = verify(lab, trace(lab.task_id, looked, got), template=registry_template(lab.template_id), source=source)
    assert not verdict.passed and verdict.answer_match is False and verdict.abstention_valid is True


def test_evidence_too_large_to_inline_is_read_through_evidence_sql(source):
    lab = label("gravity_unknown")
    assert lab.evidence is None and lab.evidence_sql
    joined = [
        {
            "sql": "SELECT count(*) FROM labevents l JOIN d_labitems d ON d.itemid = l.itemid "
            "WHERE d.label = 'Specific Gravity' AND d.fluid = 'Urine'"
        }
    ]
    found = coverage(lab, trace(lab.task_id, joined), registry_template(lab.template_id), source)
    assert found.covered, found.detail


def test_references_keep_only_each_tables_own_conjuncts():
    refs = references(
        "SELECT * FROM labevents l JOIN d_labitems d ON d.itemid = l.itemid "
        "WHERE l.subject_id = 1 AND d.label ILIKE '%k%' AND (l.hadm_id = 2 OR d.fluid = 'Blood') "
        "AND l.itemid IN (SELECT itemid FROM d_labitems WHERE category = 'Chemistry')"
    )
    own = {(r.table, r.alias): sorted(c.sql() for c in r.conjuncts) for r in refs}
    assert own == {
        ("d_labitems", "d"): ['"d"."label" ILIKE \'%k%\''],
        ("labevents", "l"): ['"l"."subject_id" = 1'],
        ("d_labitems", "d_labitems"): ['"d_labitems"."category" = \'Chemistry\''],
    }
    assert references("SELECT FROM WHERE (") == ()


def test_coverage_is_deterministic(source):
    lab = label("fake_admission")
    queries = [{"sql": "SELECT hadm_id FROM admissions WHERE subject_id = 10026255"}]
    runs = {coverage(lab, trace(lab.task_id, queries), registry_template(lab.template_id), source) for _ in range(3)}
    assert len(runs) == 1
