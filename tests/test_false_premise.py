"""false_premise on the real demo: a premise is false under concept identity in every table recording it, and
gold programs count every spelling of a drug (the demo's 'LORazepam'/'Lorazepam', 'Sodium Chloride 0.9%  Flush')."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.concepts import concept_key
from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.subtypes.false_premise import recorded_in, roots
from pipeline.templates.instantiate import CleanTask, instantiate
from pipeline.templates.programs import Tables, load_python_program, run_sql, tables_for
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}
DRUG_TEMPLATES = [
    "drug_order_count_in_admission",
    "drug_administration_count",
    "drug_first_administration_time",
    "prescription_first_dose",
    "drug_given_first_24h",
    "drug_first_route_in_admission",
]
# where the demo records drugs for an admission: table -> name column
DRUG_TABLES = {"prescriptions": "drug", "pharmacy": "medication", "emar": "medication"}


def _drug_keys(source, hadm_id: int) -> set[str]:
    """Every drug the admission's records name, keyed independently of the sub-type (any eMAR event)."""
    names = set()
    for table, column in DRUG_TABLES.items():
        names |= {
            r[0]
            for r in source.execute(f"SELECT DISTINCT {column} FROM {table} WHERE hadm_id = ?", [hadm_id]).fetchall()
        }
    return {concept_key(n) for n in names if n is not None}


def _answers(source, template_id: str, slots: dict):
    template = TEMPLATES[template_id]
    sql = run_sql(source, template.gold_sql, slots).to_dicts()
    python = load_python_program(template)(tables_for(Tables(source), template, slots), dict(slots)).to_dicts()
    return sql, python


@pytest.mark.parametrize("template_id", DRUG_TEMPLATES)
def test_false_premise_drug_is_absent_from_every_drug_table(source, template_id: str):
    template, made = TEMPLATES[template_id], 0
    for task in instantiate(source, [template], per_template=6, seed=3)[0]:
        try:
            twin = subtypes()["false_premise"].make(source, task, template, np.random.default_rng(0))
        except Rejected:
            continue
        ((slot, drug),) = twin.patch.slots.items()
        assert concept_key(drug) not in _drug_keys(source, task.slots["hadm_id"]), (template_id, drug)
        assert drug == drug.strip() and "  " not in drug  # shown in display form, like clean questions
        made += 1
    assert made, f"no false premise made for {template_id}"


def test_recorded_in_sees_variants_pharmacy_and_flushes(source):
    task = CleanTask.model_construct(slots={"subject_id": 10039997, "hadm_id": 24294180})
    assert recorded_in(source, task, "prescriptions.drug", "LamoTRIgine") == "prescriptions"  # recorded 'LaMOTrigine'
    assert recorded_in(source, task, "prescriptions.drug", "  lamotrigine ") == "prescriptions"
    flushed = CleanTask.model_construct(slots={"subject_id": 10007818, "hadm_id": 22987108})
    assert recorded_in(source, flushed, "emar.medication", "Sodium Chloride 0.9% Flush") == "prescriptions"
    only_emar = source.execute(  # a drug this admission has in eMAR but neither prescribed nor dispensed by name
        "SELECT DISTINCT e.medication FROM emar e WHERE e.hadm_id = 22987108 AND e.medication IS NOT NULL"
        " AND lower(trim(e.medication)) NOT IN (SELECT lower(trim(drug)) FROM prescriptions WHERE hadm_id = 22987108"
        " AND drug IS NOT NULL) AND lower(trim(e.medication)) NOT IN (SELECT lower(trim(medication)) FROM pharmacy"
        " WHERE hadm_id = 22987108 AND medication IS NOT NULL) ORDER BY 1"
    ).fetchall()
    for (name,) in only_emar:
        assert recorded_in(source, flushed, "emar.medication", name) == "emar"
    assert recorded_in(source, task, "prescriptions.drug", "Lamivudine") is None


def test_gold_counts_every_spelling_of_a_drug(source):
    slots = {"subject_id": 10035631, "hadm_id": 29276678, "drug": "Lorazepam"}  # 'LORazepam' and 'Lorazepam' orders
    expected = scalar(
        source, "SELECT count(*) FROM prescriptions WHERE hadm_id = 29276678 AND lower(drug) = 'lorazepam'"
    )
    spellings = scalar(
        source, "SELECT count(DISTINCT drug) FROM prescriptions WHERE hadm_id = 29276678 AND lower(drug) = 'lorazepam'"
    )
    assert spellings == 2 and expected > 2
    sql, python = _answers(source, "drug_order_count_in_admission", slots)
    assert sql == python == [{"value": expected}]


def test_flushes_are_administrations(source):
    slots = {"subject_id": 10007818, "hadm_id": 22987108, "medication": "Sodium Chloride 0.9% Flush"}
    flushed = scalar(
        source,
        "SELECT count(*) FROM emar WHERE hadm_id = 22987108 AND event_txt = 'Flushed'"
        " AND medication = 'Sodium Chloride 0.9%  Flush'",
    )
    assert flushed > 25
    sql, python = _answers(source, "drug_administration_count", slots)
    assert sql == python and sql[0]["value"] >= flushed


def test_a_lab_premise_has_no_kin_among_the_encounters_lab_and_chart_names(source):
    """Blind audit 26: "Monos" (a body-fluid item) was asked of patient 10021118, who had blood Monocytes, charted
    as "Differential-Monos". A premise lab shares no word root or abbreviation with a lab or chart name of the
    admission."""
    assert roots("Monos") & roots("Monocytes") and roots("Differential-Monos") & roots("Monos")
    assert roots("WBC") & roots("White Blood Cells") and not roots("Lipase") & roots("Lactate")
    template, subtype = TEMPLATES["lab_last_value_in_admission"], subtypes()["false_premise"]
    tasks, _ = instantiate(source, [template], per_template=8, seed=5)
    kept = 0
    for task in tasks:
        try:
            twin = subtype.make(source, task, template, np.random.default_rng(0))
        except Rejected:
            continue
        kept += 1
        names = {
            r[0]
            for sql in (
                "SELECT DISTINCT d.label FROM labevents JOIN d_labitems d USING (itemid) WHERE hadm_id = ?",
                "SELECT DISTINCT d.label FROM chartevents JOIN d_items d USING (itemid) WHERE hadm_id = ?",
            )
            for r in source.execute(sql, [task.slots["hadm_id"]]).fetchall()
        }
        premise = twin.patch.slots["lab_label"]
        assert not any(roots(premise) & roots(name) for name in names), (premise, task.task_id)
    assert kept >= 4
