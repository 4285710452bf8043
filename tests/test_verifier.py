"""The verifier: each Answer Match and Abstention Validity rule and its failure, on hand-built labels."""

from __future__ import annotations

import pytest

from pipeline.env.records import QueryRecord, ToolCall, ToolResult, Trajectory
from pipeline.env.verifier import (
    Verdict,
    registry_template,
    required_pins,
    template_of,
    verify,
)
from pipeline.release.records import LabelRecord
from pipeline.templates.answers import AnswerValue
from pipeline.templates.matching import convert_unit, normal_unit
from pipeline.templates.registry import load_templates

LAB_SLOTS = {"subject_id": 10006053, "hadm_id": 22942076, "lab_label": "Urea Nitrogen"}

TEMPLATE_VERSIONS = {t.id: t.spec.version for t in load_templates()}  # labels name the version they were built with


def label(
    template_id: str,
    expected: AnswerValue,
    *,
    contract: str = "answer",
    inspect: dict | None = None,
    slots: dict | None = None,
    scope: str = "patient",
) -> LabelRecord:
    condition = "clean" if contract == "answer" else "noise"
    return LabelRecord(
        task_id="t-test",
        pair_id="p-test",
        condition=condition,
        split="test",
        template_id=template_id,
        template_version=TEMPLATE_VERSIONS.get(template_id, 1),
        intent="laboratory",
        scope=scope,
        level="value",
        subtype="implausible_value",
        subtype_version=1,
        contract=contract,
        subject_id=10006053,
        slots=slots or LAB_SLOTS,
        gold_sql="SELECT 1",
        reference_sql="SELECT 1",
        expected=expected,
        evidence_sql="SELECT 1",
        evidence_rows=0,
        evidence=[],
        inspect=inspect,
        naive_answer=None,
        trap=None,
    )


def trajectory(answer: AnswerValue | None, *queries: tuple[str, bool], via: str = "sql") -> Trajectory:
    calls = [
        ToolCall(
            tool=via,
            arguments={"query": sql},
            result=ToolResult(ok=ok, content="..."),
            queries=[QueryRecord(sql=sql, via=via, ok=ok)],
        )
        for sql, ok in queries
    ]
    return Trajectory(task_id="t-test", agent="test", question="?", calls=calls, answer=answer)


LAST_LAB = AnswerValue(value=25.0, unit="mg/dL", records={"charttime": "2111-11-15 08:41:00", "itemid": 51006})
LAB_INSPECT = {"table": "labevents", "filter": LAB_SLOTS}
NULL = AnswerValue(value=None)


def test_number_within_tolerance_with_unit_and_records_matches():
    got = AnswerValue(value=25.0000001, unit=" MG/DL ", records={"charttime": "2111-11-15T08:41:00", "itemid": "51006"})
    verdict = verify(label("lab_last_value_in_admission", LAST_LAB), trajectory(got))
    assert verdict == Verdict(passed=True, answer_match=True, abstention_valid=None, reasons=[])


@pytest.mark.parametrize(
    ("got", "reason"),
    [
        (AnswerValue(value=25.1, unit="mg/dL", records=LAST_LAB.records), "value 25.1 does not match expected 25.0"),
        (
            AnswerValue(value=25.0, unit="mmol/L", records=LAST_LAB.records),
            "unit 'mmol/L' cannot be converted to 'mg/dL'",
        ),
        (AnswerValue(value=2.5, unit="g/L", records=LAST_LAB.records), "value 2.5 g/L (= 250 mg/dL) does not match"),
        (AnswerValue(value=25.0, unit="mg/dL", records={"itemid": 51006}), "record 'charttime' missing"),
        (
            AnswerValue(value=25.0, unit="mg/dL", records={"charttime": "2111-11-15 09:41:00", "itemid": 51006}),
            "record 'charttime' is '2111-11-15 09:41:00'",
        ),
        (AnswerValue(value=None), "answered NULL, but the record supports an answer"),
    ],
)
def test_number_mismatches_say_what_failed(got, reason):
    verdict = verify(label("lab_last_value_in_admission", LAST_LAB), trajectory(got), asking_when())
    assert not verdict.passed and verdict.answer_match is False
    assert any(r.startswith(reason) for r in verdict.reasons), verdict.reasons


def asking_when():
    """The last-lab template as if every phrasing also asked when the value was measured."""
    template = registry_template("lab_last_value_in_admission")
    answer = template.spec.answer.model_copy(update={"asked_records": ["charttime"]})
    return template.model_copy(update={"spec": template.spec.model_copy(update={"answer": answer})})


def test_record_fields_the_question_does_not_ask_for_are_not_required():
    plain = verify(label("lab_last_value_in_admission", LAST_LAB), trajectory(AnswerValue(value=25.0)))
    assert plain.passed, plain.reasons  # no unit, no records: the question asks for the value only
    asked = verify(label("lab_last_value_in_admission", LAST_LAB), trajectory(AnswerValue(value=25.0)), asking_when())
    assert asked.reasons == ["record 'charttime' missing: expected '2111-11-15 08:41:00'"]
    wrong_itemid = AnswerValue(value=25.0, records={"charttime": "2111-11-15 08:41", "itemid": 1})
    assert verify(label("lab_last_value_in_admission", LAST_LAB), trajectory(wrong_itemid), asking_when()).passed


def test_tolerance_comes_from_the_template_spec():
    expected = AnswerValue(value=5.97, unit="days")  # mean_icu_los_by_first_careunit: tolerance 0.015
    assert verify(
        label("mean_icu_los_by_first_careunit", expected, scope="population"),
        trajectory(AnswerValue(value=5.98, unit="day")),
    ).passed
    assert not verify(
        label("mean_icu_los_by_first_careunit", expected, scope="population"),
        trajectory(AnswerValue(value=6.0, unit="days")),
    ).passed


def test_units_are_normalised_through_the_alias_table():
    assert normal_unit("Percent") == normal_unit("%") == "%"
    assert normal_unit("mm Hg") == normal_unit("mmHg")
    assert normal_unit("hrs") == normal_unit("hours")
    assert normal_unit("mg/dL") != normal_unit("mmol/L")
    assert normal_unit("  ") is None


@pytest.mark.parametrize(
    ("given", "unit"),
    [
        (25.0, None),
        (25.0, ""),  # no unit: the task's answer format states mg/dL
        (0.25, "g/L"),
        (250.0, "mg/L"),
        (0.025, "g/dL"),  # the same mass concentration, converted
    ],
)
def test_a_number_without_a_unit_or_in_a_convertible_unit_matches(given, unit):
    got = AnswerValue(value=given, unit=unit, records=LAST_LAB.records)
    assert verify(label("lab_last_value_in_admission", LAST_LAB), trajectory(got)).passed


@pytest.mark.parametrize(
    ("value", "unit", "target", "expected"),
    [
        (98.6, "°F", "°C", 37.0),
        (37.0, "celsius", "degF", 98.6),
        (143.28, "hours", "days", 5.97),
        (2, "g", "mg", 2000.0),
        (150, "lbs", "kg", 68.0388555),
        (1, "L", "mL", 1000.0),
        (90, "min", "h", 1.5),
        (10, "in", "cm", 25.4),
        (500, "mcg", "mg", 0.5),
    ],
)
def test_unit_conversions_stay_in_one_dimension(value, unit, target, expected):
    assert convert_unit(value, unit, target) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("value", "unit", "target"),
    [
        (1, "mmol/L", "mg/dL"),
        (1, "kg", "L"),
        (1, "h", "°C"),
        ("high", "g", "mg"),
        (1, "furlong", "cm"),
    ],
)
def test_units_of_other_dimensions_or_unknown_do_not_convert(value, unit, target):
    assert convert_unit(value, unit, target) is None


def test_converted_days_meet_the_template_tolerance():
    expected = AnswerValue(value=5.97, unit="days")  # mean_icu_los_by_first_careunit: tolerance 0.015
    los = label("mean_icu_los_by_first_careunit", expected, scope="population")
    assert verify(los, trajectory(AnswerValue(value=143.3, unit="hours"))).passed  # 5.9708 days
    verdict = verify(los, trajectory(AnswerValue(value=150, unit="h")))
    assert verdict.reasons[0].startswith("value 150 h (= 6.25 days) does not match expected 5.97")


def test_ordered_list_needs_the_order_and_unordered_list_does_not():
    services = AnswerValue(value=["MED", "SURG"])  # admission_services_in_order: ordered
    assert verify(label("admission_services_in_order", services), trajectory(AnswerValue(value=["med", "SURG"]))).passed
    assert not verify(
        label("admission_services_in_order", services), trajectory(AnswerValue(value=["SURG", "MED"]))
    ).passed
    procedures = AnswerValue(value=["a", "b", "b"])  # procedures_of_admission: unordered (a multiset)
    assert verify(label("procedures_of_admission", procedures), trajectory(AnswerValue(value=["b", "a", "b"]))).passed
    assert not verify(label("procedures_of_admission", procedures), trajectory(AnswerValue(value=["a", "b"]))).passed
    assert not verify(label("procedures_of_admission", procedures), trajectory(AnswerValue(value="a, b, b"))).passed


def test_count_boolean_text_and_datetime_values():
    twelve = label("diagnosis_count_of_admission", AnswerValue(value=12))
    assert verify(twelve, trajectory(AnswerValue(value="12"))).passed
    assert not verify(twelve, trajectory(AnswerValue(value=12.5))).passed
    had = label("patient_had_diagnosis", AnswerValue(value=True))
    assert verify(had, trajectory(AnswerValue(value="yes"))).passed
    assert not verify(had, trajectory(AnswerValue(value=False))).passed
    home = AnswerValue(value="HOME HEALTH CARE")
    assert verify(
        label("admission_discharge_location", home), trajectory(AnswerValue(value="home  health care"))
    ).passed
    assert not verify(label("admission_discharge_location", home), trajectory(AnswerValue(value="HOME"))).passed
    day = AnswerValue(value="2117-03-13", records={"seq_num": 2})
    assert verify(
        label("procedure_first_date_in_admission", day), trajectory(AnswerValue(value="2117-03-13 00:00:00"))
    ).passed
    assert not verify(
        label("procedure_first_date_in_admission", day),
        trajectory(AnswerValue(value="2117-03-14", records={"seq_num": 2})),
    ).passed


def test_repair_contract_matches_the_repaired_value():
    repaired = label(
        "mean_icu_los_by_first_careunit",
        AnswerValue(value=3.63, unit="days"),
        contract="repair",
        inspect={"table": "icustays", "filter": {"first_careunit": "MICU"}},
        scope="population",
    )
    assert verify(repaired, trajectory(AnswerValue(value=3.63, unit="days"))).passed
    naive = verify(repaired, trajectory(AnswerValue(value=4.02, unit="days")))
    assert not naive.passed and naive.abstention_valid is None


EVIDENCE_SQL = (
    "SELECT l.* FROM labevents AS l JOIN d_labitems d ON d.itemid = l.itemid "
    "WHERE l.subject_id = 10006053 AND 22942076 = l.hadm_id AND d.label = 'Urea Nitrogen'"
)


def test_abstention_with_the_evidence_inspected_is_valid():
    abstain = label("lab_last_value_in_admission", NULL, contract="abstain", inspect=LAB_INSPECT)
    verdict = verify(abstain, trajectory(AnswerValue(value=None), (EVIDENCE_SQL, True)))
    assert verdict == Verdict(passed=True, answer_match=True, abstention_valid=True, reasons=[])
    via_python = verify(abstain, trajectory(AnswerValue(value=None), (EVIDENCE_SQL, True), via="python"))
    assert via_python.passed


@pytest.mark.parametrize(
    ("queries", "reason"),
    [
        ([], "no successful query read table 'labevents'"),
        ([(EVIDENCE_SQL, False)], "no successful query read table 'labevents'"),
        (
            [("SELECT * FROM labevents WHERE subject_id = 10006053 AND d_label = 'Urea Nitrogen'", True)],
            "filtered labevents.hadm_id = 22942076",
        ),
        (
            [("SELECT * FROM labevents l WHERE l.subject_id = 10006053 AND l.hadm_id = 22942077", True)],
            "labevents.hadm_id = 22942076; a column (lab_label) = urea nitrogen",
        ),
        (
            [
                (
                    "SELECT * FROM labevents l, admissions a WHERE a.hadm_id = 22942076 AND l.subject_id = 10006053 "
                    "AND l.label = 'Urea Nitrogen'",
                    True,
                )
            ],
            "labevents.hadm_id = 22942076",
        ),
    ],
)
def test_abstention_without_the_evidence_inspected_is_invalid(queries, reason):
    abstain = label("lab_last_value_in_admission", NULL, contract="abstain", inspect=LAB_INSPECT)
    verdict = verify(abstain, trajectory(AnswerValue(value=None), *queries))
    assert not verdict.passed and verdict.answer_match is True and verdict.abstention_valid is False
    assert reason in verdict.reasons[0], verdict.reasons


def test_in_lists_lowercase_and_string_literals_pin_a_column():
    orphan = label(
        "procedures_of_admission",
        NULL,
        contract="abstain",
        inspect={"table": "admissions", "filter": {"hadm_id": [23300884]}},
    )
    sql = "SELECT count(*) FROM admissions WHERE hadm_id IN ('23300884', 1)"
    assert verify(orphan, trajectory(NULL, (sql, True))).abstention_valid is True
    concept = label(
        "lab_abnormal_count_in_admission",
        NULL,
        contract="abstain",
        inspect={"table": "d_labitems", "filter": {"label": "Ura Nitrogen"}},
    )
    sql = "SELECT * FROM d_labitems WHERE lower(label) = lower('Ura Nitrogen')"
    assert verify(concept, trajectory(NULL, (sql, True))).abstention_valid is True
    prefix = "SELECT * FROM d_labitems WHERE label LIKE 'Ura%'"
    assert verify(concept, trajectory(NULL, (prefix, True))).abstention_valid is False


def test_non_null_answer_on_an_abstain_task_fails_even_with_inspection():
    abstain = label("lab_last_value_in_admission", NULL, contract="abstain", inspect=LAB_INSPECT)
    verdict = verify(abstain, trajectory(LAST_LAB, (EVIDENCE_SQL, True)))
    assert not verdict.passed and verdict.answer_match is False and verdict.abstention_valid is True
    assert verdict.reasons[0].startswith("expected NULL (abstain")


def test_no_answer_fails_and_says_so():
    unanswered = trajectory(None, (EVIDENCE_SQL, True))
    unanswered.truncated = True
    verdict = verify(label("lab_last_value_in_admission", LAST_LAB), unanswered)
    assert not verdict.passed and verdict.reasons == ["no answer: the episode ran out of turns without an answer call"]


def test_parameters_are_not_pins_but_concept_slots_and_columns_are():
    inspect = {"table": "labevents", "filter": {"lab_label": "RDW", "threshold": 15.5, "unit": "%"}}
    pins = required_pins(inspect, template_of(label("patients_with_lab_above_threshold", NULL, slots={})))
    assert [(p.key, p.column, p.values) for p in pins] == [("lab_label", None, ("rdw",))]


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="not in the template registry"):
        verify(label("no_such_template", LAST_LAB), trajectory(LAST_LAB))
    with pytest.raises(ValueError, match="cannot be verified against the label of task"):
        verify(label("lab_last_value_in_admission", LAST_LAB), Trajectory(task_id="other", agent="a", question="?"))
    old = label("lab_last_value_in_admission", LAST_LAB).model_copy(update={"template_version": 99})
    with pytest.raises(
        ValueError,
        match=f"label has template 'lab_last_value_in_admission' v99, the registry has v{TEMPLATE_VERSIONS['lab_last_value_in_admission']}",
    ):
        verify(old, trajectory(LAST_LAB))
    with pytest.raises(ValueError, match="template 'nope' is not in the template registry"):
        registry_template("nope")
    with pytest.raises(ValueError, match="not a MIMIC-IV table"):
        verify(
            label("lab_last_value_in_admission", NULL, contract="abstain", inspect={"table": "nope", "filter": {}}),
            trajectory(NULL),
        )


def test_verdicts_are_deterministic():
    abstain = label("lab_last_value_in_admission", NULL, contract="abstain", inspect=LAB_INSPECT)
    runs = {verify(abstain, trajectory(NULL, ("SELECT 1 FROM labevents", True))).model_dump_json() for _ in range(3)}
    assert len(runs) == 1
