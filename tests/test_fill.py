"""Filling intent x sub-type cells: a cell that no sampled task's pair covers gets further tasks of its templates,
verified for its sub-type; what each cell took is in the manifest, and a cell the draw cannot fill says so."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pipeline import stages
from pipeline.build import BuildConfig
from pipeline.db import open_source
from pipeline.noise.base import subtypes
from pipeline.release.fill import applicable_cells, empty_cells, fill_cells
from pipeline.release.pairs import CHUNK
from pipeline.stages import run_build
from pipeline.templates.answers import answers_agree
from pipeline.templates.instantiate import InstantiationReport, instantiate, more_tasks
from pipeline.templates.registry import load_templates


def _template(template_id: str):
    return next(t for t in load_templates() if t.id == template_id)


def test_applicable_and_empty_cells_follow_the_templates_and_the_verified_pairs():
    templates = load_templates()
    cells = applicable_cells(templates, subtypes())
    for (intent, name), cell_templates in cells.items():
        assert cell_templates and all(t.spec.intent == intent and name in t.spec.noise for t in cell_templates)
    delay = next(t for t in templates if t.id == "icu_admission_delay_hours")
    assert ("encounter", "orphan_reference") in cells and delay in cells[("encounter", "orphan_reference")]
    for intent in ("microbiology", "laboratory", "medication", "diagnosis_procedure", "vital_signs"):  # docs/noise.md
        assert (intent, "orphan_reference") not in cells

    class Pair:  # the two attributes empty_cells reads
        def __init__(self, intent, subtype):
            self.clean, self.subtype = type("Clean", (), {"intent": intent})(), subtype

    covered = {"t1": [Pair("encounter", "orphan_reference")]}
    assert ("encounter", "orphan_reference") not in empty_cells(covered, templates, subtypes())
    assert ("encounter", "orphan_reference") in empty_cells({}, templates, subtypes())
    assert set(empty_cells({}, templates, subtypes())) == set(cells)


def test_more_tasks_are_new_seeded_and_agree_like_the_first(synthetic_db: Path):
    template = _template("procedure_first_date_in_admission")
    with open_source(synthetic_db) as con:
        first, _ = instantiate(con, [template], 3, seed=5)
        known = {t.task_id for t in first}
        more = more_tasks(con, [template], 6, 5, known, InstantiationReport())[template.id]
        report = InstantiationReport()
        again = more_tasks(con, [template, _template("lab_mean_value_population")], 6, 5, known, report, workers=2)
    assert more and not known & {t.task_id for t in more}
    assert [t.model_dump() for t in more] == [t.model_dump() for t in again[template.id]]  # in a pool alike
    assert report.kept == {template.id: len(more), "lab_mean_value_population": len(again["lab_mean_value_population"])}
    assert all(
        t.template_id == template.id and answers_agree(t.answer, t.python_answer, template.spec.answer) for t in more
    )


def _config(synthetic_db: Path, out: Path, **kw) -> BuildConfig:
    return BuildConfig(
        db=synthetic_db,
        releases_dir=out,
        version="v1",
        per_template=1,
        seed=0,
        intents=["diagnosis_procedure"],
        subtypes=["displaced_time", "null_value", "missing_record"],
        **kw,
    )


def test_an_empty_cell_is_filled_from_further_tasks_and_counted(synthetic_db: Path, tmp_path: Path):
    config = _config(synthetic_db, tmp_path)
    work = stages.prepare(config)
    tasks = [stages.instantiate_shard(work, shard) for shard in stages.shard_names(config)]
    pairs = [stages.pair_shard(work, t) for t in tasks]
    filled = stages.fill(work, tasks, pairs)
    found = [json.loads(line) for line in (filled / "pairs.jsonl").read_text().splitlines()]
    base = {json.loads(line)["task_id"] for t in tasks for line in (t / "tasks.jsonl").read_text().splitlines()}
    cells = json.loads((filled / "cells.json").read_text())
    fill_rejections = sum(n for *_, n in json.loads((filled / "rejected.json").read_text()))
    verified = sum(len((d / "pairs.jsonl").read_text().splitlines()) for d in [*pairs, filled])

    manifest = json.loads((run_build(config) / "manifest.json").read_text())  # resumes from the stages above
    assert manifest["pairs"]["filled_cells"] == cells and manifest["pairs"]["verified"] == verified
    chosen = {n: s for n, s in subtypes().items() if n in manifest["subtypes"]}
    applicable = {f"{i}/{n}" for i, n in applicable_cells(load_templates(), chosen) if i == "diagnosis_procedure"}
    assert cells and set(cells) <= applicable, "some cell needed filling at one task per template"
    for cell, fill in cells.items():
        assert fill["tried"] > 0 and fill["kept"] <= min(fill["verified"], 1), cell
        assert fill["verified"] <= fill["tried"], cell
    kept = {c: f["kept"] for c, f in cells.items() if f["kept"]}
    assert kept, "on the synthetic source at least one emptied cell fills"
    assert Counter(f"{p['clean']['intent']}/{p['subtype']}" for p in found) == kept
    assert not base & {p["clean"]["task_id"] for p in found}, "filled cells take further tasks, not the sampled ones"
    assert fill_rejections == sum(f["tried"] - f["verified"] for f in cells.values())
    drawn = manifest["pairs"]["fill_draw"]  # the further draw's own instantiation report, not thrown away
    assert sum(drawn["kept"].values()) >= sum(f["tried"] for f in cells.values()) > 0
    assert set(drawn["kept"]) <= {t for f in cells.values() for t in f["templates"]}


def test_without_a_draw_no_cell_is_filled(synthetic_db: Path, tmp_path: Path):
    config = _config(synthetic_db, tmp_path, fill_tasks=0)
    manifest = json.loads((run_build(config) / "manifest.json").read_text())
    filled = manifest["pairs"]["filled_cells"]
    assert filled and all(f["tried"] == f["kept"] == 0 for f in filled.values())
    assert manifest["config"]["fill_tasks"] == 0


def test_a_fill_drawn_and_verified_by_two_workers_finds_and_counts_the_same(synthetic_db: Path):
    template = _template("procedure_first_date_in_admission")
    chosen = {name: subtypes()[name] for name in ("null_value", "displaced_time")}
    tried = {}
    with open_source(synthetic_db) as con:
        tasks, _ = instantiate(con, [template], 1, seed=0)
        for want in (4, 12):
            results = []
            for workers in (1, 2):
                drawing = InstantiationReport()
                found, rejected, cells = fill_cells(
                    con, tasks, {}, [template], chosen, 0, draw=40, want=want, drawing=drawing, workers=workers
                )
                pair_ids = {task_id: [p.pair_id for p in pairs] for task_id, pairs in found.items()}
                results.append((pair_ids, rejected, {c: f.model_dump() for c, f in cells.items()}, drawing))
            assert results[0] == results[1], want
            pair_ids, rejected, cells, _ = results[1]
            assert len(pair_ids) == sum(fill["kept"] for fill in cells.values()) == want * len(cells)
            assert sum(rejected.values()) == sum(fill["tried"] - fill["verified"] for fill in cells.values())
            tried[want] = [fill["tried"] for fill in cells.values()]
    # two workers verify two chunks a round: a cell the first chunk fills counts that chunk only, and a cell that
    # needs more rounds goes on
    assert CHUNK in tried[4] and max(tried[12]) > 2 * CHUNK, tried
