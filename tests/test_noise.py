"""Noise sub-types, overlays and pair verification, on real demo rows; the conformance suite runs per sub-type."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline.db import scalar
from pipeline.noise.base import REGISTRY, Rejected, subtypes
from pipeline.noise.overlay import overlay
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

SUBTYPES = subtypes()
TEMPLATES = {t.id: t for t in load_templates()}


PAIRS_PER_SUBTYPE = 8


@pytest.fixture(scope="module")
def demo_pairs(source):
    """Every registered sub-type tried on demo tasks of the templates that list it, one task per template in
    turn, until PAIRS_PER_SUBTYPE pairs are verified (so the cost does not grow with the template count)."""
    tasks, _ = instantiate(source, list(TEMPLATES.values()), per_template=2, seed=11)
    tables, pairs, rejected = Tables(source), {}, {}
    for name, subtype in SUBTYPES.items():
        for task in sorted(tasks, key=lambda t: t.task_id.rsplit("-", 1)[1]):  # interleave templates
            template = TEMPLATES[task.template_id]
            if not subtype.applies(template) or len(pairs.get(name, [])) >= PAIRS_PER_SUBTYPE:
                continue
            try:
                pairs.setdefault(name, []).append(verify_pair(source, tables, task, template, subtype, seed=0))
            except Rejected as exc:
                rejected.setdefault(name, []).append(exc.reason)
    return pairs, rejected


def test_registry_spans_the_three_levels():
    assert {s.level for s in SUBTYPES.values()} == {"record", "value", "query"}
    assert all(REGISTRY[name].name == name for name in SUBTYPES)


def test_the_noise_guide_names_every_sub_type_at_its_version():
    """docs/noise.md gives each sub-type a section headed with its current version (they drifted by two)."""
    guide = (Path(__file__).parents[1] / "docs" / "noise.md").read_text()
    for name, subtype in subtypes().items():
        assert f"\n## {name} (v{subtype.version})\n" in guide, name


@pytest.mark.parametrize("name", sorted(SUBTYPES))
def test_subtype_contract_holds_on_real_demo_rows(demo_pairs, source, name: str):
    pairs, rejected = demo_pairs
    assert pairs.get(name), f"{name}: no verified pair on the demo; rejections: {rejected.get(name)}"
    for pair in pairs[name]:
        assert pair.clean.answer.value is not None  # the clean twin is answerable
        with overlay(source, pair.patch):
            careful = source.sql(pair.reference_sql).fetchall()
        if pair.contract == "abstain":
            assert pair.expected.value is None and careful == []  # the careful reading finds no support
        else:
            assert pair.contract == "repair" and pair.expected.value not in (None, [])
            assert careful != [] and pair.naive_answer != pair.expected  # the repair differs from the naive reading
            # a population repair leaves invalid records out; a patient one is a value re-expressed in another unit
            assert pair.clean.scope == "population" or name == "unit_mismatch"
        if pair.patch.tables:
            assert pair.noisy_question == pair.clean.question  # data noise never shows in the question


def test_nonexistent_entity_names_an_identifier_no_table_holds(demo_pairs, source):
    for pair in demo_pairs[0]["nonexistent_entity"]:
        ((slot, value),) = pair.patch.slots.items()
        table = {"subject_id": "patients", "hadm_id": "admissions", "stay_id": "icustays"}[slot]
        assert scalar(source, f"SELECT count(*) FROM {table} WHERE {slot} = ?", [value]) == 0
        assert str(value) in pair.noisy_question and pair.noisy_question != pair.clean.question


def test_a_nulled_reading_leaves_no_reported_one_to_fall_back_on(source):
    """A lab or chart row without a number is a usual MIMIC row (the demo has thousands) that the clean gold skips,
    so nulling one reading among reported ones makes the next reported one the careful answer as well as the
    careless one (blind audit 27: "the most recent result" beside a masked latest row): where null_value or
    placeholder_value takes a lab or chart number, no reported reading of the question is left."""
    assert scalar(source, "SELECT count(*) FROM labevents WHERE valuenum IS NULL") > 1000
    measured, checked = {"labevents", "chartevents"}, 0
    for template in TEMPLATES.values():
        listed = [SUBTYPES[n] for n in ("null_value", "placeholder_value") if SUBTYPES[n].applies(template)]
        if template.evidence_table not in measured or not listed:
            continue
        for task in instantiate(source, [template], per_template=3, seed=3)[0]:
            for subtype in listed:
                try:
                    pair = verify_pair(source, Tables(source), task, template, subtype, seed=0)
                except Rejected:
                    continue
                assert pair.naive_answer is None or pair.naive_answer.value in (None, []), pair.pair_id
                checked += 1
    assert checked, "no null_value or placeholder_value pair over a lab or chart number verified on the demo"


def test_null_value_reaches_record_tables(demo_pairs):
    # beyond measurements, a record loses the value column its question reads (a discharge location, a route)
    tables = {table for pair in demo_pairs[0]["null_value"] for table in pair.patch.touched_tables}
    assert tables - {"labevents", "chartevents", "outputevents", "inputevents"}, tables


def test_pairs_are_deterministic(source):
    task = instantiate(source, [TEMPLATES["lab_last_value_in_admission"]], per_template=1, seed=3)[0][0]
    template, tables = TEMPLATES[task.template_id], Tables(source)
    first = verify_pair(source, tables, task, template, SUBTYPES["nonexistent_entity"], seed=5).model_dump_json()
    again = verify_pair(source, tables, task, template, SUBTYPES["nonexistent_entity"], seed=5).model_dump_json()
    assert first == again


def test_overlay_costs_the_patch_not_the_table(source):
    row = source.sql("SELECT * FROM labevents ORDER BY labevent_id LIMIT 1").pl().to_dicts()[0]
    patch = Patch(
        tables={
            "labevents": TablePatch(
                key_columns=["labevent_id"], hide=[{"labevent_id": row["labevent_id"]}], add=[{**row, "valuenum": -1.0}]
            )
        }
    )
    before = scalar(source, "SELECT count(*) FROM labevents")
    with overlay(source, patch):
        temp_rows = scalar(source, "SELECT sum(estimated_size) FROM duckdb_tables() WHERE temporary")
        assert temp_rows == 5  # one hidden key, its rowid, one added row and two sentinels: no table copied
        views = {
            r[0]
            for r in source.execute("SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal").fetchall()
        }
        assert views == {"labevents", "__add_labevents"}  # untouched tables stay the source's
        assert scalar(source, "SELECT count(*) FROM labevents") == before
        assert scalar(source, "SELECT valuenum FROM labevents WHERE labevent_id = ?", [row["labevent_id"]]) == -1.0
    assert (
        scalar(source, "SELECT valuenum FROM labevents WHERE labevent_id = ?", [row["labevent_id"]]) == row["valuenum"]
    )


def test_source_is_never_written(demo_db: Path, source):
    with pytest.raises(duckdb.Error):
        source.execute("DELETE FROM main.patients")


def test_null_value_rejects_evidence_that_is_already_null(source):
    task = instantiate(source, [TEMPLATES["lab_last_value_in_admission"]], per_template=1, seed=3)[0][0]
    broken = task.model_copy(
        update={
            "evidence": [
                {
                    "table_name": "labevents",
                    "labevent_id": scalar(source, "SELECT min(labevent_id) FROM labevents WHERE valuenum IS NULL"),
                }
            ]
        }
    )
    with pytest.raises(Rejected, match="evidence_not_clean"):
        SUBTYPES["null_value"].make(source, broken, TEMPLATES[task.template_id], None)


def test_overlay_differs_from_the_source_only_by_its_patch(demo_pairs, source):
    """Whole-table check (the per-pair verification compares only the keyed rows)."""
    from pipeline.noise.verify import _matched_rows

    catalog = scalar(source, "SELECT current_database()")
    for name, pairs in demo_pairs[0].items():
        for pair in pairs[:2]:
            matched = _matched_rows(source, pair.patch)  # source rows the hidden keys select
            with overlay(source, pair.patch):
                for table in pair.patch.touched_tables:
                    whole = f'"{catalog}".main.{table}'
                    removed = scalar(
                        source, f"SELECT count(*) FROM (SELECT * FROM {whole} EXCEPT ALL SELECT * FROM {table})"
                    )
                    added = scalar(
                        source, f"SELECT count(*) FROM (SELECT * FROM {table} EXCEPT ALL SELECT * FROM {whole})"
                    )
                    renumbered = pair.patch.tables[table].renumbered  # rows that only take another id count twice
                    expected = (matched[table] + renumbered, len(pair.patch.tables[table].add) + renumbered)
                    assert (removed, added) == expected, (name, table)
                    assert removed + added > 0, (name, table)


def test_worker_pool_gives_the_same_pairs(source):
    # every pair is seeded by its task and sub-type: two processes find exactly what one finds, in the same order
    from pipeline.release.pairs import candidate_pairs

    templates = [
        TEMPLATES[t] for t in ("lab_last_value_in_admission", "admission_discharge_location", "patients_with_diagnosis")
    ]
    tasks, _ = instantiate(source, templates, per_template=4, seed=5)
    by_id = {t.id: t for t in templates}
    one = candidate_pairs(source, tasks, by_id, SUBTYPES, seed=0)
    two = candidate_pairs(source, tasks, by_id, SUBTYPES, seed=0, workers=2)
    dump = lambda result: ({k: [p.model_dump(mode="json") for p in v] for k, v in result[0].items()}, dict(result[1]))  # noqa: E731
    assert len(tasks) > 8 and dump(one) == dump(two) and list(one[0]) == list(two[0])
