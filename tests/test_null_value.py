"""null_value on real demo rows: the fact's companions and sibling rows go NULL with it."""

from __future__ import annotations

from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import overlay
from pipeline.noise.subtypes.null_value import unit_without_number
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}


def _pairs(source, template_id: str, tasks: int = 4) -> list:
    template, pairs = TEMPLATES[template_id], []
    for task in instantiate(source, [template], per_template=tasks, seed=7)[0]:
        try:
            pairs.append(verify_pair(source, Tables(source), task, template, subtypes()["null_value"], seed=0))
        except Rejected:
            pass
    assert pairs, f"null_value: no verified pair for {template_id}"
    return pairs


def test_a_nulled_prescription_time_is_null_in_pharmacy_too(source):
    for pair in _pairs(source, "prescription_duration_hours"):
        (row,) = pair.patch.tables["prescriptions"].add
        column = "stoptime" if row["stoptime"] is None else "starttime"
        assert row[column] is None
        with overlay(source, pair.patch):
            kept = source.execute(
                f"SELECT {column} FROM pharmacy WHERE pharmacy_id = ?", [row["pharmacy_id"]]
            ).fetchall()
        assert kept and all(value is None for (value,) in kept)  # the careful reader finds no time there either


def test_a_nulled_interpretation_keeps_no_mic(source):
    for pair in _pairs(source, "organism_resistant_to_antibiotic"):
        for row in pair.patch.tables["microbiologyevents"].add:
            assert row["interpretation"] is None and row["dilution_value"] is None and row["dilution_text"] is None


def test_a_nulled_chart_number_keeps_no_text_and_a_nulled_unit_no_transfer(source):
    # nor its unit: no real chart row without a number carries one (blind audit 28 found the 148 nulled diastolics
    # by `value IS NULL AND valueuom IS NOT NULL`); a lab keeps its unit, as 4,218 real numberless lab rows do
    assert not unit_without_number(source, "chartevents", "valuenum", "valueuom")
    assert unit_without_number(source, "labevents", "valuenum", "valueuom")
    for pair in _pairs(source, "vital_mean_in_stay"):
        rows = pair.patch.tables["chartevents"].add
        assert all(r["valuenum"] is None and r["value"] is None and r["valueuom"] is None for r in rows)
    for pair in _pairs(source, "icu_stay_first_careunit"):
        (stay,) = pair.patch.tables["icustays"].add
        with overlay(source, pair.patch):
            units = source.execute(
                "SELECT careunit FROM transfers WHERE hadm_id = ? AND intime = ?", [stay["hadm_id"], stay["intime"]]
            ).fetchall()
        assert units == [(None,)]  # the ICU transfer no longer names the unit


def test_a_billed_procedure_charted_in_the_icu_keeps_its_date(source):
    """ICU procedure events within a day of a billed procedure may record it (CRRT for urinary filtration): its
    ICD procedure date is never nulled; one without such events is (no procedure is moved on the demo since
    displaced_time v11: untouched procedures lie outside their admissions by habit)."""
    import numpy as np

    template = TEMPLATES["procedure_first_date_in_admission"]
    reasons = {True: set(), False: set()}
    for task in instantiate(source, [template], per_template=12, seed=3)[0]:
        charted = (
            source.execute(
                "SELECT count(*) FROM procedures_icd p JOIN d_icd_procedures d USING (icd_code, icd_version) "
                "JOIN procedureevents e USING (hadm_id) WHERE p.hadm_id = ? AND lower(trim(d.long_title)) = lower(trim(?)) "
                "AND abs(date_diff('day', e.starttime::DATE, p.chartdate)) <= 1",
                [task.slots["hadm_id"], task.slots["procedure_title"]],
            ).fetchall()[0][0]
            > 0
        )
        try:
            subtypes()["null_value"].make(source, task, template, np.random.default_rng(0))
            reasons[charted].add("made")
        except Rejected as exc:
            reasons[charted].add(exc.reason)
    assert reasons[True] == {"witnessed_elsewhere"}, reasons
    assert "made" in reasons[False] and "witnessed_elsewhere" not in reasons[False], reasons


def test_a_nulled_infusion_keeps_no_unit_no_numberless_row_carries(source):
    """Blind audit 32: nulled infusions kept rateuom 'mL/hour' and totalamountuom 'ml'; real rows without a rate never
    carry a rate unit (0 of 9,366) and those without a total almost never a total unit (2 of 3,314)."""
    assert not unit_without_number(source, "inputevents", "rate", "rateuom")
    assert not unit_without_number(source, "inputevents", "totalamount", "totalamountuom")
    for pair in _pairs(source, "input_volume_total_in_stay"):
        for row in pair.patch.tables["inputevents"].add:
            assert row["amount"] is None and row["amountuom"] is None
            assert row["rateuom"] is None and row["totalamountuom"] is None
