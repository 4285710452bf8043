"""Concept identity (pipeline/concepts.py): the key, the display form, SQL == polars == Python, the declarations."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest

from pipeline.concepts import (
    administered_expr,
    administered_sql,
    administration_events,
    concept_expr,
    concept_key,
    concept_records,
    concept_sql,
    display_name,
    display_value,
    same_concept,
)
from pipeline.source.schema import load_schema
from pipeline.templates.instantiate import one_per_concept
from pipeline.templates.registry import load_templates
from pipeline.templates.render import render_sql

# (name, key): tall-man, whitespace (trailing, inner runs, tabs, newlines), hyphen runs, unicode, empty
KEYS = [
    ("LaMOTrigine", "lamotrigine"),
    ("LamoTRIgine", "lamotrigine"),
    ("OxycoDONE (Immediate Release) ", "oxycodone (immediate release)"),
    ("OxyCODONE (Immediate Release)", "oxycodone (immediate release)"),
    ("OxyCODONE--Acetaminophen (5mg-325mg)", "oxycodone-acetaminophen (5mg-325mg)"),
    ("Sodium Chloride 0.9%  Flush", "sodium chloride 0.9% flush"),
    ("\tPotassium\n\nChloride \x0b", "potassium chloride"),
    ("x - - y", "x - - y"),
    ("Ünïcode  ÉÀ", "ünïcode éà"),
    ("a\u00a0b", "a\u00a0b"),
    (" ", ""),
    ("", ""),
]
# (name, display form, tall-man folding)
DISPLAYS = [
    ("LaMOTrigine", "Lamotrigine", True),
    ("OxycoDONE (Immediate Release) ", "Oxycodone (Immediate Release)", True),
    ("OxyCODONE SR (OxyconTIN)", "Oxycodone SR (Oxycontin)", True),
    ("NIFEdipine ER", "Nifedipine ER", True),
    ("Potassium mL pH", "Potassium mL pH", True),
    ("NTproBNP", "NTproBNP", True),
    ("IgG  ", "IgG", True),
    ("HydrALAZINE", "HydrALAZINE", False),
    ("Sodium Chloride 0.9%  Flush", "Sodium Chloride 0.9% Flush", True),
]


@pytest.mark.parametrize(("name", "key"), KEYS)
def test_key_is_the_same_in_python_polars_and_sql(name: str, key: str):
    assert concept_key(name) == key
    assert pl.DataFrame({"x": [name]}).select(concept_expr("x")).item() == key
    assert duckdb.execute(f"SELECT {concept_sql('?')}", [name]).fetchone()[0] == key


def test_same_concept_and_none():
    assert same_concept("LaMOTrigine", "lamotrigine ") and not same_concept("Lamotrigine", "Lamivudine")
    assert concept_key(None) is None and not same_concept(None, None) and display_name(None) is None


@pytest.mark.parametrize(("name", "shown", "tall_man"), DISPLAYS)
def test_display_form(name: str, shown: str, tall_man: bool):
    assert display_name(name, tall_man=tall_man) == shown
    assert concept_key(shown) == concept_key(name)  # the display form names the same concept


def test_display_folds_tall_man_only_for_drug_vocabularies():
    assert display_value("prescriptions.drug", "HydrALAZINE") == "Hydralazine"
    assert display_value("d_labitems.label", "NTproBNP ") == "NTproBNP"
    assert display_value("d_items.label", "PFRatio") == "PFRatio"
    assert display_value("prescriptions.drug", 5) == 5 and display_value(None, "LaMOTrigine") == "LaMOTrigine"


def test_administration_events_agree_in_sql_and_polars():
    texts = [
        *administration_events(),
        "Administered ",
        "administered",
        "Not Given",
        "Hold Dose",
        "Delayed ",
        " in Other Location",
        "Confirmed",
        "Stopped",
        None,
    ]
    frame = pl.DataFrame({"event_txt": texts})
    polars_side = frame.select(administered_expr("event_txt")).to_series().to_list()
    con = duckdb.connect()
    con.register("emar", frame.to_arrow())
    sql_side = [r[0] for r in con.execute(f"SELECT {administered_sql('event_txt')} FROM emar").fetchall()]
    expected = [True] * (len(administration_events()) + 2) + [False] * 6 + [None]
    assert polars_side == sql_side == expected
    assert {"Administered", "Flushed", "Applied", "Started", "Restarted"} <= set(administration_events())


def test_every_concept_vocabulary_declares_its_record_tables():
    schema = load_schema()
    for template in load_templates():
        for name, slot in template.spec.slots.items():
            if not slot.vocabulary:
                continue
            records = concept_records(slot.vocabulary)
            assert records, (
                f"{template.id}.{name}: vocabulary {slot.vocabulary} has no concept_records in concepts.yaml"
            )
            for record in records:
                named_in = record.get("via", record["table"])
                assert record["column"] in schema[named_in].column_names, f"{record} (concepts.yaml)"
                assert "subject_id" in schema[record["table"]].column_names, f"{record}: not a patient table"
                for key in record.get("keys", []):
                    assert key in schema[record["table"]].column_names and key in schema[named_in].column_names


def test_programs_compare_every_concept_slot_as_a_concept():
    """Gold SQL and evidence SQL use a concept slot's value only through concept(); gold Python only through
    concept_is / concept_key (executed on the demo's spelling variants in tests/test_false_premise.py)."""
    for template in load_templates():
        for name, slot in template.spec.slots.items():
            if not slot.vocabulary:
                continue
            slots = {
                n: "Zz Concept" if n == name else "x" if s.type == "text" else 1 for n, s in template.spec.slots.items()
            }
            for what, text in (("gold SQL", template.gold_sql), ("evidence SQL", template.evidence_sql)):
                sql = render_sql(text, slots)
                wrapped = sql.count(concept_sql("'Zz Concept'"))
                assert wrapped and wrapped == sql.count("'Zz Concept'"), (
                    f"{template.id} {what}: {name} compared as bytes"
                )
            python = template.gold_python
            assert f'slots["{name}"]' in python and f'== slots["{name}"]' not in python, f"{template.id}: {name}"


def _kept_per_concept(template, names: list[str], rows: list[tuple]) -> list[tuple]:
    """one_per_concept on candidates in the given order, read back in their new order."""
    con = duckdb.connect()
    frame = pl.DataFrame(rows, schema={**dict.fromkeys(names[:2], pl.Int64), names[2]: pl.String}, orient="row")
    con.register("rows", frame)
    con.execute("CREATE TEMP TABLE candidates AS SELECT * FROM rows")  # numbered by rowid in this order
    kept = con.sql(f"SELECT rowid, * FROM {one_per_concept(con, template, 'candidates')} ORDER BY rowid").fetchall()
    assert [row[0] for row in kept] == list(range(len(kept)))  # numbered again from 0, for the draw
    return [row[1:] for row in kept]


def test_sampling_keeps_one_candidate_per_concept_in_display_form():
    template = next(t for t in load_templates() if t.id == "drug_order_count_in_admission")
    names = list(template.spec.slots)
    assert names == ["subject_id", "hadm_id", "drug"]
    rows = [
        (1, 2, "LaMOTrigine"),
        (1, 2, "LamoTRIgine"),
        (1, 2, "OxycoDONE (Immediate Release) "),
        (1, 2, "OxyCODONE (Immediate Release)"),
        (1, 3, "LamoTRIgine"),
    ]
    assert _kept_per_concept(template, names, rows) == [
        (1, 2, "Lamotrigine"),
        (1, 2, "Oxycodone (Immediate Release)"),
        (1, 3, "Lamotrigine"),
    ]
    with_null = [(1, 2, None), (1, 2, None), (1, 2, "LaMOTrigine")]
    assert _kept_per_concept(template, names, with_null) == [(1, 2, None), (1, 2, "Lamotrigine")]
