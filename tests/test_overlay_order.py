"""The unordered overlay (verification's): the ordered overlay's rows, each patient's in the same order, the
untouched patients' in the source's scan order on every run, in SQL and in polars; and every published program
reads the same answer through it as through the ordered overlay an agent's episode uses."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline import jsonl
from pipeline.noise.overlay import overlay, polars_overlay
from pipeline.noise.patch import Patch, TablePatch
from pipeline.release.records import LabelRecord, PatchRecord
from pipeline.templates.answers import canonical_answer, first_reading
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}
COLUMNS = "labevent_id, subject_id, itemid, valuenum"


def _two_patient_patch(con) -> tuple[Patch, list[int]]:
    """Hide one row of one patient, add a changed copy of it and a row of a second patient."""
    subjects = [r[0] for r in con.execute("SELECT DISTINCT subject_id FROM labevents ORDER BY 1 LIMIT 2").fetchall()]
    first, second = (
        con.sql(f"SELECT * FROM labevents WHERE subject_id = {s} AND valuenum IS NOT NULL ORDER BY labevent_id LIMIT 2")
        .pl()
        .to_dicts()
        for s in subjects
    )
    added = [{**first[1], "valuenum": first[1]["valuenum"] + 1.0}, {**second[0], "labevent_id": 2 * 10**9}]
    hide = [{"labevent_id": first[1]["labevent_id"]}]
    return Patch(tables={"labevents": TablePatch(key_columns=["labevent_id"], hide=hide, add=added)}), subjects


def _read(con, patch: Patch, ordered: bool) -> pl.DataFrame:
    with overlay(con, patch, ordered=ordered):
        return con.sql(f"SELECT {COLUMNS} FROM labevents").pl()


def test_the_unordered_overlay_keeps_the_rows_and_each_patients_order(synthetic_source):
    con = synthetic_source
    patch, subjects = _two_patient_patch(con)
    ordered, unordered = _read(con, patch, True), _read(con, patch, False)
    assert unordered.sort("labevent_id").equals(ordered.sort("labevent_id"))  # the same rows
    patched = pl.col("subject_id").is_in(subjects)
    assert unordered.filter(patched).equals(ordered.filter(patched))  # each patched patient's rows in record order
    assert unordered.tail(ordered.filter(patched).height)["subject_id"].is_in(subjects).all()  # after the others
    source = con.sql(f"SELECT {COLUMNS} FROM labevents WHERE subject_id NOT IN ({subjects[0]}, {subjects[1]})").pl()
    assert unordered.filter(~patched).equals(source)  # the others in the source's scan order, not shuffled
    assert all(_read(con, patch, False).equals(unordered) for _ in range(3))  # on every run (two threads)


def test_the_polars_overlay_has_the_unordered_sql_overlays_order(synthetic_source):
    con = synthetic_source
    patch, _ = _two_patient_patch(con)
    in_sql = _read(con, patch, False)
    in_polars = polars_overlay(Tables(con), patch, ordered=False)["labevents"].select(COLUMNS.split(", ")).collect()
    assert in_polars.equals(in_sql)
    assert not in_polars.equals(polars_overlay(Tables(con), patch)["labevents"].select(COLUMNS.split(", ")).collect())


def test_published_programs_answer_alike_through_either_overlay(synthetic_source, synthetic_release_dir: Path):
    """The verifier's answers (reference, gold read carelessly) on the unordered overlay are an episode's."""
    con = synthetic_source
    labels = {
        lab.pair_id: lab
        for lab in jsonl.read(synthetic_release_dir / "labels.jsonl", LabelRecord)
        if lab.condition == "noise"
    }
    patches = jsonl.read(synthetic_release_dir / "patches" / "patches.jsonl", PatchRecord)
    compared = 0
    for record in patches:
        if not record.patch.tables:
            continue  # query noise: no overlay
        label = labels[record.pair_id]
        spec = TEMPLATES[label.template_id].spec.answer
        answers = []
        for ordered in (True, False):
            with overlay(con, record.patch, ordered=ordered):
                answers.append(
                    (
                        canonical_answer(con.sql(label.reference_sql).pl(), spec),
                        first_reading(con.sql(label.gold_sql).pl(), spec),
                    )
                )
        assert answers[0] == answers[1], record.pair_id
        assert answers[1][0].value == label.expected.value or label.contract == "abstain", record.pair_id
        compared += 1
    assert compared >= 20, compared
