"""Release builds on the real demo: files match the manifest, labels stay hidden, publishing is atomic and exact."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from pipeline.build import BuildConfig, run_build

SUBTYPES = ["missing_record", "null_value", "implausible_value", "nonexistent_entity", "unknown_concept"]


def _config(demo_db: Path, out: Path, **kw) -> BuildConfig:
    return BuildConfig(db=demo_db, releases_dir=out, version="v1", per_template=1, seed=3, subtypes=SUBTYPES, **kw)


@pytest.fixture(scope="module")
def release(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_build(_config(demo_db, tmp_path_factory.mktemp("releases")))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_release_has_every_file_and_the_manifest_hashes_them(release: Path):
    manifest = json.loads((release / "manifest.json").read_text())
    files = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == files >= {
        "tasks.jsonl", "labels.jsonl", "patches/patches.jsonl", "README.md", "gates.json",
        "tasks/train.parquet", "tasks/test.parquet", "labels/train.parquet", "labels/test.parquet"}
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == entry["sha256"], name


def test_manifest_counts_match_the_files(release: Path):
    manifest, labels = json.loads((release / "manifest.json").read_text()), _jsonl(release / "labels.jsonl")
    noise = [lab for lab in labels if lab["condition"] == "noise"]
    counted: dict[str, Counter] = {}
    for lab in noise:
        counted.setdefault(lab["split"], Counter())[f"{lab['intent']}/{lab['scope']}/{lab['level']}/{lab['subtype']}"] += 1
    assert manifest["pairs"]["counts"] == {split: dict(c) for split, c in counted.items()}
    assert manifest["pairs"]["published"] == len(noise) == len(_jsonl(release / "patches" / "patches.jsonl"))
    assert len(_jsonl(release / "tasks.jsonl")) == 2 * len(noise)
    assert set(manifest["subtypes"]) == set(SUBTYPES) and len(manifest["templates"]) == 62


def test_tasks_carry_nothing_from_labels(release: Path):
    tasks, labels = _jsonl(release / "tasks.jsonl"), _jsonl(release / "labels.jsonl")
    assert all(set(t) == {"task_id", "question", "scope", "intent", "split"} for t in tasks)
    hidden = {lab["pair_id"] for lab in labels} | {lab["reference_sql"] for lab in labels}
    text = (release / "tasks.jsonl").read_text()
    assert not any(secret in text for secret in hidden)
    visible_values = {str(v) for t in tasks for v in t.values()}
    assert not visible_values & {"clean", "noise", "abstain", "repair", "answer"}  # no condition or contract value
    # clean and noisy tasks are interleaved under opaque ids: the order says nothing about pairing
    conditions = {lab["task_id"]: lab["condition"] for lab in labels}
    order = [conditions[t["task_id"]] for t in tasks]
    assert order != ["clean", "noise"] * (len(order) // 2) and order != ["noise", "clean"] * (len(order) // 2)


def test_splits_are_patient_disjoint_and_test_is_balanced(release: Path):
    labels = _jsonl(release / "labels.jsonl")
    splits_of: dict[int, set] = {}
    for lab in labels:
        if lab["subject_id"] is not None:
            splits_of.setdefault(lab["subject_id"], set()).add(lab["split"])
    assert splits_of and all(len(s) == 1 for s in splits_of.values())
    cells = Counter((lab["scope"], lab["level"]) for lab in labels if lab["condition"] == "noise" and lab["split"] == "test")
    assert len(cells) == 6 and len(set(cells.values())) == 1


def test_an_existing_version_is_never_overwritten(release: Path, demo_db: Path):
    before = {p: p.read_bytes() for p in release.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match="never overwritten"):
        run_build(_config(demo_db, release.parent))
    assert {p: p.read_bytes() for p in release.rglob("*") if p.is_file()} == before


def test_same_inputs_and_seed_give_byte_identical_files(release: Path, demo_db: Path, tmp_path: Path):
    again = run_build(_config(demo_db, tmp_path))
    for path in release.rglob("*"):
        if path.is_file():
            assert (again / path.relative_to(release)).read_bytes() == path.read_bytes(), path.name


def test_a_failed_build_publishes_nothing(demo_db: Path, tmp_path: Path):
    def failing_gate(*_):
        raise RuntimeError("gate says no")

    with pytest.raises(RuntimeError, match="gate says no"):
        run_build(_config(demo_db, tmp_path, intents=["microbiology"]), gate=failing_gate)
    assert os.listdir(tmp_path) == []


def test_ablation_keeps_only_the_selected_noise(demo_db: Path, tmp_path: Path):
    config = _config(demo_db, tmp_path, levels=["query", "value"], intents=["laboratory"])
    config.subtypes = ["nonexistent_entity", "null_value"]
    labels = _jsonl(run_build(config) / "labels.jsonl")
    assert labels and {lab["subtype"] for lab in labels} <= {"nonexistent_entity", "null_value"}
    assert {lab["intent"] for lab in labels} == {"laboratory"}


def test_datasets_library_reads_the_release(release: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets", reason="datasets is a test dependency (pyproject [test])")
    tasks = datasets.load_dataset("parquet", data_files={s: str(release / "tasks" / f"{s}.parquet") for s in ("train", "test")},
                                  cache_dir=str(release.parent / ".hf-cache"))
    manifest = json.loads((release / "manifest.json").read_text())
    assert tasks["test"].num_rows + tasks["train"].num_rows == 2 * manifest["pairs"]["published"]
    assert tasks["test"].column_names == ["task_id", "question", "scope", "intent", "split"]
