"""orphan_reference, displaced_time, false_premise and unknown_concept: each contract checked on real demo rows."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from pipeline.concepts import concept_key, concept_sql
from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import overlay
from pipeline.noise.subtypes.unknown_concept import in_any_dictionary, unknown_names
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

SUBTYPES = subtypes()
TEMPLATES = {t.id: t for t in load_templates()}


def _pairs(source, template_id: str, subtype: str, tasks: int = 3) -> list:
    """Verified pairs of `subtype` for a few demo tasks of one template (rejected tasks are skipped)."""
    template, tables, pairs = TEMPLATES[template_id], Tables(source), []
    for task in instantiate(source, [template], per_template=tasks, seed=7)[0]:
        try:
            pairs.append(verify_pair(source, tables, task, template, SUBTYPES[subtype], seed=0))
        except Rejected:
            pass
    assert pairs, f"{subtype}: no verified pair for {template_id}"
    return pairs


def test_orphan_reference(source):
    """The admission goes with its transfers; the ICU stay still references it, and nothing places its admit time
    (a lab first-24-hours question on the demo is mostly answered at every likely admit time: recoverable)."""
    for pair in _pairs(source, "icu_admission_delay_hours", "orphan_reference"):
        hadm_id = pair.clean.slots["hadm_id"]
        assert {"admissions", "transfers"} <= set(pair.patch.touched_tables) and pair.expected.value is None
        with overlay(source, pair.patch):  # the admission is gone, its ICU stay still references it
            assert scalar(source, "SELECT count(*) FROM admissions WHERE hadm_id = ?", [hadm_id]) == 0
            assert scalar(source, "SELECT count(*) FROM transfers WHERE hadm_id = ?", [hadm_id]) == 0
            assert scalar(source, "SELECT count(*) FROM icustays WHERE hadm_id = ?", [hadm_id]) > 0
        assert not pair.trap and pair.naive_answer.value is None  # the careless join finds no admit time


def test_orphan_reference_needs_the_encounter_row(source):
    """Evidence rows carry their encounter's key: a question they answer alone is no orphan (a careful analyst
    answers it); only a window offset from the encounter's times (or a non-key attribute) needs the parent."""
    orphan = SUBTYPES["orphan_reference"]
    for template_id in (
        "lab_last_value_in_admission",
        "lab_abnormal_count_in_admission",
        "vital_first_after_icu_admission",
        "mean_urine_output_first_24h_by_careunit",
    ):
        template = TEMPLATES[template_id]
        listed = template.model_copy(update={"spec": template.spec.model_copy(update={"noise": ["orphan_reference"]})})
        assert not orphan.applies(listed), template_id  # keys, a bare "after the start", a population question
    assert orphan.applies(TEMPLATES["icu_admission_delay_hours"])
    # the first two days' organisms, the first day's lab or dose, do not move with the admission hour where its
    # own events place it (docs/noise.md): no longer listed
    for template_id in (
        "organisms_first_48h_of_admission",
        "lab_first_value_within_24h",
        "drug_given_first_24h",
        "drugs_started_first_24h_by_route",
        "procedure_day_of_admission",
    ):
        assert not orphan.applies(TEMPLATES[template_id]), template_id
    task = instantiate(source, [TEMPLATES["lab_last_value_in_admission"]], per_template=1, seed=7)[0][0]
    with pytest.raises(Rejected, match="children_answer_without_parent"):
        orphan.make(source, task, TEMPLATES["lab_last_value_in_admission"], np.random.default_rng(0))


def test_displaced_time(source):
    for pair in _pairs(source, "lab_first_value_within_24h", "displaced_time"):
        hidden = {"labevent_id": pair.clean.evidence[0]["labevent_id"]}  # the answer's lab (its specimen moves along)
        assert hidden in pair.patch.tables["labevents"].hide
        specimen, item = source.execute(
            "SELECT specimen_id, itemid FROM labevents WHERE labevent_id = ?", [hidden["labevent_id"]]
        ).fetchall()[0]
        # it comes back with the id its new time gives it among the patient's labs (id_order.py)
        (moved,) = [
            r for r in pair.patch.tables["labevents"].add if (r["specimen_id"], r["itemid"]) == (specimen, item)
        ]
        admittime, dischtime = source.execute(
            "SELECT admittime, dischtime FROM admissions WHERE hadm_id = ?", [moved["hadm_id"]]
        ).fetchall()[0]
        clean_time = scalar(source, "SELECT charttime FROM labevents WHERE labevent_id = ?", [hidden["labevent_id"]])
        assert moved["hadm_id"] == pair.clean.slots["hadm_id"]  # it keeps its admission
        assert admittime <= clean_time < admittime + dt.timedelta(hours=24)  # it was in the asked window
        assert moved["charttime"] < admittime  # and now lies outside the admission (so outside its first 24 h)
        assert pair.expected.value is None and pair.noisy_question == pair.clean.question


def test_false_premise(source):
    for pair in _pairs(source, "drug_order_count_in_admission", "false_premise"):
        drug, clean = pair.patch.slots["drug"], pair.clean.slots
        assert drug != clean["drug"] and drug in pair.noisy_question
        same = f"{concept_sql('drug')} = {concept_sql('?')}"  # one drug in any spelling (pipeline/concepts.py)
        assert scalar(source, f"SELECT count(*) FROM prescriptions WHERE {same}", [drug]) > 0  # a real drug
        assert (
            scalar(source, f"SELECT count(*) FROM prescriptions WHERE {same} AND hadm_id = ?", [drug, clean["hadm_id"]])
            == 0
        )
        assert pair.expected.value is None and not pair.patch.tables


def test_false_premise_counts_rows_without_an_admission_in_its_days(source):
    """A lab drawn in the ED (hadm_id NULL) during an admission is the admission's for a careful analyst: a premise
    about it is not false, though no row of the admission names it."""
    from types import SimpleNamespace

    from pipeline.noise.subtypes.false_premise import recorded_concepts

    subject_id, hadm_id, label = source.sql(
        "SELECT a.subject_id, a.hadm_id, min(d.label) FROM labevents l JOIN d_labitems d USING (itemid) "
        "JOIN admissions a ON a.subject_id = l.subject_id AND CAST(l.charttime AS DATE) BETWEEN CAST(a.admittime AS DATE) "
        "AND CAST(a.dischtime AS DATE) WHERE l.hadm_id IS NULL AND NOT EXISTS (SELECT 1 FROM labevents o "
        "WHERE o.hadm_id = a.hadm_id AND o.itemid = l.itemid) GROUP BY ALL ORDER BY ALL LIMIT 1"
    ).fetchall()[0]
    task = SimpleNamespace(slots={"subject_id": subject_id, "hadm_id": hadm_id})
    assert concept_key(label) in recorded_concepts(source, task, "d_labitems.label")


def test_unknown_concept(source):
    for pair in _pairs(source, "lab_last_value_in_admission", "unknown_concept"):
        label, clean = pair.patch.slots["lab_label"], pair.clean.slots["lab_label"]
        assert not in_any_dictionary(source, label) and in_any_dictionary(source, clean)
        assert label in unknown_names(source, "d_labitems.label", "lab_label") and label in pair.noisy_question
        assert pair.expected.value is None
    population = _pairs(source, "patients_with_organism", "unknown_concept")
    assert all(p.naive_answer.value == 0 and p.trap for p in population)  # a count of 0 is not the answer


def test_rejections_name_the_reason(source):
    task = instantiate(source, [TEMPLATES["admission_los_days"]], per_template=1, seed=7)[0][0]
    assert not SUBTYPES["displaced_time"].applies(TEMPLATES["admission_los_days"])  # the admission is the window
    with pytest.raises(Rejected, match="evidence_is_the_encounter"):
        SUBTYPES["orphan_reference"].make(source, task, TEMPLATES["admission_los_days"], None)
    task = instantiate(source, [TEMPLATES["lab_abnormal_count_in_admission"]], per_template=1, seed=7)[0][0]
    with pytest.raises(Rejected, match="gold_answers_every_candidate"):  # the gold counts 0 for any unmeasured lab
        SUBTYPES["false_premise"].make(source, task, TEMPLATES[task.template_id], np.random.default_rng(0))


@pytest.mark.parametrize("template_id", ["lab_last_value_in_window", "admissions_count_in_window"])
def test_out_of_window(source, template_id: str):
    for pair in _pairs(source, template_id, "out_of_window"):
        clean, noisy = pair.clean.slots, pair.noisy_slots
        days = lambda s: (dt.date.fromisoformat(s["window_end"]) - dt.date.fromisoformat(s["window_start"])).days  # noqa: E731
        assert set(pair.patch.slots) == {"window_start", "window_end"} and not pair.patch.tables
        assert days(noisy) == days(clean) and noisy["window_start"] != clean["window_start"]  # moved, same length
        assert noisy["window_start"] in pair.noisy_question and pair.expected.value is None
        assert source.sql(pair.reference_sql).fetchall() == []  # the moved window holds no record
        if template_id == "lab_last_value_in_window":  # the clean answer's record lies outside the moved window
            charttime = dt.datetime.fromisoformat(pair.clean.answer.records["charttime"])
            assert (
                not dt.date.fromisoformat(noisy["window_start"])
                <= charttime.date()
                <= dt.date.fromisoformat(noisy["window_end"])
            )


def test_nonexistent_entity_on_dense_synthetic_identifiers(synthetic_1000):
    # a generated database numbers its patients consecutively: the free identifier lies above the largest
    from pipeline.noise.overlay import open_source

    con = open_source(synthetic_1000)
    try:
        template = TEMPLATES["lab_last_value_in_admission"]
        task = instantiate(con, [template], per_template=1, seed=7)[0][0]
        pair = verify_pair(con, Tables(con), task, template, SUBTYPES["nonexistent_entity"], seed=0)
        ((slot, value),) = pair.patch.slots.items()
        largest = scalar(con, f"SELECT max({slot}) FROM {'admissions' if slot == 'hadm_id' else 'patients'}")
        assert len(str(value)) == len(str(largest)) and pair.expected.value is None
    finally:
        con.close()


def test_a_missing_stretch_runs_past_the_questions_window(source):
    """missing_record hides a measurement's rows 2-12 h beyond the asked ones on each side (same patient and item),
    so the gap does not start and stop where the question's window does (blind audit 38)."""
    from pipeline.noise.subtypes.missing_record import _beyond_the_window

    subject, stay = source.execute(
        "SELECT subject_id, stay_id FROM chartevents WHERE itemid = 220045 GROUP BY ALL ORDER BY count(*) DESC LIMIT 1"
    ).fetchall()[0]
    series = (
        source.sql(f"SELECT * FROM chartevents WHERE stay_id = {stay} AND itemid = 220045 ORDER BY charttime")
        .pl()
        .to_dicts()
    )
    asked = series[len(series) // 2 : len(series) // 2 + 6]  # six heart rates in the middle of the stay
    keys = ["stay_id", "itemid", "charttime"]
    beyond = _beyond_the_window(source, "chartevents", asked, keys, np.random.default_rng(4))
    first, last = asked[0]["charttime"], asked[-1]["charttime"]
    assert beyond, "an hourly series has rows within 2 h of any stretch"
    assert {(k["stay_id"], k["itemid"]) for k in beyond} <= {(stay, 220045)} | {
        (s, 220045)
        for (s,) in source.execute("SELECT stay_id FROM icustays WHERE subject_id = ?", [subject]).fetchall()
    }
    for key in beyond:
        assert key not in [{c: row[c] for c in keys} for row in asked]
        at = key["charttime"]
        assert first - dt.timedelta(hours=12) <= at < first or last < at <= last + dt.timedelta(hours=12)
    before = [k for k in beyond if k["charttime"] < first]
    after = [k for k in beyond if k["charttime"] > last]
    assert before and after  # both edges of the gap move away from the window's
    assert beyond == _beyond_the_window(source, "chartevents", asked, keys, np.random.default_rng(4))
    assert _beyond_the_window(source, "admissions", [{"hadm_id": 1, "subject_id": 1}], ["hadm_id"], None) == []
