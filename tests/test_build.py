"""Release builds on the synthetic source: files match the manifest, labels stay hidden, publishing is atomic and
exact, and the path-passing stages (sharded, resumed, rerun) give the same release as one-process builds. The
release of the real demo (tests/conftest.py) is held to the same file, label and split checks in one test."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
from aggregate import assert_all_pass

from pipeline import stages
from pipeline.build import BuildConfig
from pipeline.stages import run_build
from pipeline.templates.registry import load_templates

SUBTYPES = ["missing_record", "null_value", "implausible_value", "nonexistent_entity", "unknown_concept"]


def _config(synthetic_db: Path, out: Path, **kw) -> BuildConfig:
    return BuildConfig(db=synthetic_db, releases_dir=out, version="v1", per_template=1, seed=3, subtypes=SUBTYPES, **kw)


@pytest.fixture(scope="module")
def release(synthetic_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_build(_config(synthetic_db, tmp_path_factory.mktemp("releases")))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def manifest_hashes_every_file(release: Path) -> None:
    manifest = json.loads((release / "manifest.json").read_text())
    files = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()} - {"manifest.json"}
    assert (
        set(manifest["files"])
        == files
        >= {
            "tasks.jsonl",
            "labels.jsonl",
            "patches/patches.jsonl",
            "README.md",
            "gates.json",
            "report.html",
            "tasks/train.parquet",
            "tasks/test.parquet",
            "labels/train.parquet",
            "labels/test.parquet",
        }
    )
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == entry["sha256"], name


def test_release_has_every_file_and_the_manifest_hashes_them(release: Path):
    manifest_hashes_every_file(release)


def manifest_counts_match_the_files(release: Path) -> None:
    manifest, labels = json.loads((release / "manifest.json").read_text()), _jsonl(release / "labels.jsonl")
    noise = [lab for lab in labels if lab["condition"] == "noise"]
    counted: dict[str, Counter] = {}
    for lab in noise:
        counted.setdefault(lab["split"], Counter())[
            f"{lab['intent']}/{lab['scope']}/{lab['level']}/{lab['subtype']}"
        ] += 1
    assert manifest["pairs"]["counts"] == {split: dict(c) for split, c in counted.items()}
    assert manifest["pairs"]["published"] == len(noise) == len(_jsonl(release / "patches" / "patches.jsonl"))
    assert len(_jsonl(release / "tasks.jsonl")) == 2 * len(noise)
    assert set(manifest["templates"]) == {t.id for t in load_templates()}


def test_manifest_counts_match_the_files(release: Path):
    manifest_counts_match_the_files(release)
    assert set(json.loads((release / "manifest.json").read_text())["subtypes"]) == set(SUBTYPES)


def tasks_carry_nothing_from_labels(release: Path) -> None:
    tasks, labels = _jsonl(release / "tasks.jsonl"), _jsonl(release / "labels.jsonl")
    assert all(set(t) == {"task_id", "question", "scope", "intent", "split", "answer_format"} for t in tasks)
    hidden = {lab["pair_id"] for lab in labels} | {lab["reference_sql"] for lab in labels}
    text = (release / "tasks.jsonl").read_text()
    assert not any(secret in text for secret in hidden)
    visible_values = {str(v) for t in tasks for v in t.values()}
    assert not visible_values & {"clean", "noise", "abstain", "repair", "answer"}  # no condition or contract value
    # clean and noisy tasks are interleaved under opaque ids: the order says nothing about pairing
    conditions = {lab["task_id"]: lab["condition"] for lab in labels}
    order = [conditions[t["task_id"]] for t in tasks]
    assert order != ["clean", "noise"] * (len(order) // 2) and order != ["noise", "clean"] * (len(order) // 2)


def test_tasks_carry_nothing_from_labels(release: Path):
    tasks_carry_nothing_from_labels(release)


def evidence_queries_return_their_rows(release: Path, db: Path) -> None:
    """Every label's evidence_sql returns its evidence rows on the source; inline up to EVIDENCE_INLINE_MAX."""
    import duckdb

    from pipeline.release.records import EVIDENCE_INLINE_MAX
    from pipeline.templates.instantiate import _jsonable

    labels = _jsonl(release / "labels.jsonl")
    with duckdb.connect(str(db), read_only=True) as con:
        for lab in labels:
            rows = con.sql(f"SELECT * FROM ({lab['evidence_sql']}) ORDER BY ALL").pl().to_dicts()
            assert len(rows) == lab["evidence_rows"] > 0, lab["task_id"]
            if lab["evidence_rows"] <= EVIDENCE_INLINE_MAX:
                assert lab["evidence"] == [{k: _jsonable(v) for k, v in row.items()} for row in rows], lab["task_id"]
            else:
                assert lab["evidence"] is None, lab["task_id"]


def test_every_label_evidence_query_returns_its_rows_and_large_evidence_is_not_inlined(
    release: Path, synthetic_db: Path
):
    evidence_queries_return_their_rows(release, synthetic_db)
    labels = _jsonl(release / "labels.jsonl")
    assert {lab["evidence"] is None for lab in labels} == {True, False}  # both kinds are in this release


def splits_are_patient_disjoint_and_test_is_balanced(release: Path) -> None:
    labels = _jsonl(release / "labels.jsonl")
    splits_of: dict[int, set] = {}
    for lab in labels:
        if lab["subject_id"] is not None:
            splits_of.setdefault(lab["subject_id"], set()).add(lab["split"])
    assert splits_of and all(len(s) == 1 for s in splits_of.values())
    cells = Counter(
        (lab["scope"], lab["level"]) for lab in labels if lab["condition"] == "noise" and lab["split"] == "test"
    )
    assert len(cells) == 6 and len(set(cells.values())) == 1


def test_splits_are_patient_disjoint_and_test_is_balanced(release: Path):
    splits_are_patient_disjoint_and_test_is_balanced(release)


def test_an_existing_version_is_never_overwritten(release: Path, synthetic_db: Path):
    before = {p: p.read_bytes() for p in release.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match="never overwritten"):
        run_build(_config(synthetic_db, release.parent))
    assert {p: p.read_bytes() for p in release.rglob("*") if p.is_file()} == before


def test_same_inputs_and_seed_give_byte_identical_files(release: Path, synthetic_db: Path, tmp_path: Path):
    again = run_build(_config(synthetic_db, tmp_path))
    for path in release.rglob("*"):
        if path.is_file():
            assert (again / path.relative_to(release)).read_bytes() == path.read_bytes(), path.name


def _visible(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def test_a_failed_build_publishes_nothing_and_a_rerun_resumes_from_its_stage_outputs(
    synthetic_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    def failing_gate(*_):
        raise RuntimeError("gate says no")

    config = _config(synthetic_db, tmp_path, intents=["microbiology"])
    with pytest.raises(RuntimeError, match="gate says no"):
        run_build(config, gate=failing_gate)
    assert _visible(tmp_path) == [] and sorted(os.listdir(stages.work_dir(config))) == [
        "assembled",
        "config.json",
        "filled",
        "pairs",
        "source.json",
        "tasks",
    ]

    def recomputed(*_args, **_kw):
        raise AssertionError("a finished stage was computed again")

    monkeypatch.setattr(stages, "instantiate", recomputed)
    monkeypatch.setattr(stages, "planned_pairs", recomputed)
    monkeypatch.setattr(stages, "fill_cells", recomputed)
    release = run_build(config)
    assert _visible(tmp_path) == ["v1"] and release == tmp_path / "v1" and not (tmp_path / ".work").exists()


def _file_states(root: Path) -> dict[str, tuple[str, int]]:
    return {
        p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def test_intent_shards_merged_give_the_same_release_and_a_rerun_returns_it_untouched(release: Path, synthetic_db: Path):
    config = _config(synthetic_db, release.parent)
    shards = stages.shard_names(config, template_shards=2)
    assert len(shards) > 6 and {s.split(".")[0] for s in shards} == set(config.intents)
    before = _file_states(release)
    # Same version in the same folder: publish returns the release only if the sharded build's manifest (which
    # holds the sha256 of every file) is byte-identical to the one-process build's; otherwise it raises.
    assert stages.run_stages(config, shards=shards) == release
    assert _file_states(release) == before and _visible(release.parent) == ["v1"]


def _assembled_from(release: Path, folder: Path, **manifest_changes) -> Path:
    """A release's records and manifest (without file hashes) laid out as the assemble stage writes them."""
    folder.mkdir()
    manifest = {k: v for k, v in json.loads((release / "manifest.json").read_text()).items() if k != "files"}
    (folder / "manifest.json").write_text(json.dumps({**manifest, **manifest_changes}, indent=1, sort_keys=True) + "\n")
    for name, source in (("tasks", "tasks.jsonl"), ("labels", "labels.jsonl"), ("patches", "patches/patches.jsonl")):
        (folder / f"{name}.jsonl").write_bytes((release / source).read_bytes())
    return folder


def test_publish_returns_the_same_release_and_refuses_a_different_one(
    release: Path, synthetic_db: Path, tmp_path: Path
):
    config, before = _config(synthetic_db, release.parent), _file_states(release)
    gates = tmp_path / "gates.json"
    gates.write_bytes((release / "gates.json").read_bytes())
    same = _assembled_from(release, tmp_path / "same")
    assert stages.publish(stages.prepare(config), same, gates) == release
    other = _assembled_from(release, tmp_path / "other", seed=99)
    work = stages.prepare(config)
    with pytest.raises(FileExistsError, match="different manifest"):
        stages.publish(work, other, gates)
    shutil.rmtree(work)  # its staged copy holds the other manifest: no later build of this config may reuse it
    assert _file_states(release) == before


def test_publish_retried_after_dying_between_rename_and_cleanup_returns_the_release(
    release: Path, synthetic_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    config = _config(synthetic_db, tmp_path / "releases")
    gates = tmp_path / "gates.json"
    gates.write_bytes((release / "gates.json").read_bytes())
    assembled, work = _assembled_from(release, tmp_path / "assembled"), stages.prepare(config)

    def killed(*_args, **_kw):
        raise KeyboardInterrupt("killed after the rename")

    with monkeypatch.context() as patch:
        patch.setattr(stages, "discard_work", killed)
        with pytest.raises(KeyboardInterrupt):
            stages.publish(work, assembled, gates)
    assert work.is_dir() and (tmp_path / "releases" / "v1").is_dir()
    published = stages.publish(work, assembled, gates)
    assert {k: h for k, (h, _) in _file_states(published).items()} == {
        k: h for k, (h, _) in _file_states(release).items()
    }
    assert _visible(tmp_path / "releases") == ["v1"] and not work.exists()


def test_shards_partition_the_selected_templates(synthetic_db: Path, tmp_path: Path):
    config = _config(synthetic_db, tmp_path, intents=["laboratory", "vital_signs"], scopes=["patient"])
    everything = [t.id for t in stages.shard_templates(config, stages.ALL)]
    parts = [t.id for shard in stages.shard_names(config, 3) for t in stages.shard_templates(config, shard)]
    assert sorted(parts) == sorted(everything) and len(parts) == len(set(parts)) > 0
    with pytest.raises(ValueError, match="selects no template"):
        stages.shard_templates(config, "microbiology")
    with pytest.raises(ValueError, match="unknown value"):
        _config(synthetic_db, tmp_path, levels=["record", "noise"])


def test_ablation_keeps_only_the_selected_noise(synthetic_db: Path, tmp_path: Path):
    config = _config(synthetic_db, tmp_path, levels=["query", "value"], intents=["laboratory"])
    config.subtypes = ["nonexistent_entity", "null_value"]
    labels = _jsonl(run_build(config) / "labels.jsonl")
    assert labels and {lab["subtype"] for lab in labels} <= {"nonexistent_entity", "null_value"}
    assert {lab["intent"] for lab in labels} == {"laboratory"}


def test_datasets_library_reads_the_release(release: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets", reason="datasets is a test dependency (pyproject [test])")
    tasks = datasets.load_dataset(
        "parquet",
        data_files={s: str(release / "tasks" / f"{s}.parquet") for s in ("train", "test")},
        cache_dir=str(release.parent / ".hf-cache"),
    )
    manifest = json.loads((release / "manifest.json").read_text())
    assert tasks["test"].num_rows + tasks["train"].num_rows == 2 * manifest["pairs"]["published"]
    assert tasks["test"].column_names == ["task_id", "question", "scope", "intent", "split", "answer_format"]
    assert set(tasks["test"][0]["answer_format"]) == {"type", "unit", "ordered", "records"}


def test_pairs_per_cell_caps_every_cell_and_is_recorded(synthetic_db: Path, tmp_path: Path):
    config = _config(synthetic_db, tmp_path, intents=["microbiology", "laboratory"], pairs_per_cell=1)
    release = run_build(config)
    manifest, labels = json.loads((release / "manifest.json").read_text()), _jsonl(release / "labels.jsonl")
    cells = Counter(
        (lab["intent"], lab["scope"], lab["level"], lab["subtype"]) for lab in labels if lab["condition"] == "noise"
    )
    assert cells and set(cells.values()) == {1} and manifest["config"]["pairs_per_cell"] == 1


def test_cap_per_cell_keeps_a_seeded_subset_of_each_cell():
    from types import SimpleNamespace

    from pipeline.build import cap_per_cell

    def pair(i: int, subtype: str):
        return SimpleNamespace(
            pair_id=f"p{i}-{subtype}",
            level="value",
            subtype=subtype,
            clean=SimpleNamespace(intent="laboratory", scope="patient"),
        )

    pairs = [pair(i, "null_value") for i in range(5)] + [pair(i, "unit_mismatch") for i in range(2)]
    kept = cap_per_cell(pairs, 3, seed=1)
    assert Counter(p.subtype for p in kept) == {"null_value": 3, "unit_mismatch": 2}
    assert [p.pair_id for p in kept] == [p.pair_id for p in cap_per_cell(pairs, 3, seed=1)]
    assert {p.pair_id for p in kept} != {p.pair_id for p in cap_per_cell(pairs, 3, seed=2)}  # the seed decides
    assert cap_per_cell(pairs, None, seed=1) == pairs


def test_an_unset_cap_leaves_the_manifest_config_as_before(release: Path):
    assert "pairs_per_cell" not in json.loads((release / "manifest.json").read_text())["config"]


def test_labels_of_releases_published_before_evidence_sql_still_load(release: Path):
    from pipeline.release.records import LabelRecord

    label = _jsonl(release / "labels.jsonl")[0]
    older = {k: v for k, v in label.items() if k not in ("evidence_sql", "evidence_rows")}
    assert LabelRecord.model_validate(older).evidence_sql is None
    assert LabelRecord.model_validate(label).evidence_rows == label["evidence_rows"]


def test_source_connections_keep_duckdbs_own_progress_bar_off(synthetic_db: Path):
    from pipeline.db import open_source, scalar

    with open_source(synthetic_db) as con:
        assert scalar(con, "SELECT current_setting('enable_progress_bar')") is False


def report_plots_and_tabulates_the_published_pairs(release: Path) -> None:
    import re

    manifest, labels = json.loads((release / "manifest.json").read_text()), _jsonl(release / "labels.jsonl")
    report = (release / "report.html").read_text()
    assert report.count("<svg") == 4  # pairs by intent x sub-type, splits, traps, rejections
    assert f"{manifest['pairs']['published']} Clean-Noise pairs published" in report
    noise = [lab for lab in labels if lab["condition"] == "noise"]
    for intent, total in Counter(lab["intent"] for lab in noise).items():  # the heatmap table's last column
        row = re.search(rf"<tr><td>{intent}</td>(.*?)</tr>", report, re.S).group(1)
        assert re.findall(r"<td>(\d+)</td>", row)[-1] == str(total)
    rejected = sum(manifest["rejections"].values())
    table = report[report.index("<h2>Rejected candidate pairs") :]
    assert rejected == sum(int(n) for n in re.findall(r"<td>[^<]+</td><td>[^<]+</td><td>(\d+)</td></tr>", table))


def test_report_plots_and_tabulates_the_published_pairs(release: Path):
    report_plots_and_tabulates_the_published_pairs(release)


def test_the_demo_release_holds_to_the_same_checks(demo_release_dir: Path, demo_db: Path):
    """The session's release of the real demo (every template and sub-type): files, counts, hidden labels, every
    evidence query, disjoint and balanced splits and the report; every failing check named."""
    assert_all_pass(
        [
            ("manifest hashes every file", partial(manifest_hashes_every_file, demo_release_dir)),
            ("manifest counts match the files", partial(manifest_counts_match_the_files, demo_release_dir)),
            ("tasks carry nothing from labels", partial(tasks_carry_nothing_from_labels, demo_release_dir)),
            (
                "evidence queries return their rows",
                partial(evidence_queries_return_their_rows, demo_release_dir, demo_db),
            ),
            ("splits", partial(splits_are_patient_disjoint_and_test_is_balanced, demo_release_dir)),
            ("report", partial(report_plots_and_tabulates_the_published_pairs, demo_release_dir)),
        ]
    )


_THREADS: dict = {}


def _record_thread_pools(db: str) -> None:
    """A worker's initializer (its module imports polars as it is unpickled, as a pipeline worker's does): the
    polars pool size and the DuckDB threads of the source it opens, as the worker starts."""
    import polars

    from pipeline.db import open_source, scalar

    with open_source(db) as con:
        _THREADS["at_start"] = polars.thread_pool_size(), int(scalar(con, "SELECT current_setting('threads')"))
        _THREADS["memory"] = scalar(con, "SELECT current_setting('memory_limit')")


def _recorded_thread_pools() -> tuple[int, int]:
    return _THREADS["at_start"]


def _recorded_memory_limit() -> str:
    return _THREADS["memory"]


def _memory_limit_of(setting: str) -> str:
    """How DuckDB reports a memory limit set to `setting`."""
    import duckdb

    with duckdb.connect() as con:
        con.execute("SET memory_limit = ?", [setting])
        return con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]


def test_pool_workers_share_the_cores_and_the_parent_keeps_its_environment(synthetic_db: Path, monkeypatch):
    """Two workers each as wide as the machine oversubscribe it (slower than one worker); each gets its share of the
    cores for polars and DuckDB and a DuckDB memory limit (not DuckDB's 80% of the machine per worker), a setting
    the user made is kept, and the parent's environment is as it was."""
    from pipeline.workers import THREAD_SETTINGS, WORKER_MEMORY, spawn_pool, usable_cores

    if usable_cores() < 2:
        pytest.skip("one usable core: a worker's share is the whole machine, nothing to tell apart")
    for name in (*THREAD_SETTINGS, "EHRGYM_DUCKDB_MEMORY"):
        monkeypatch.delenv(name, raising=False)
    share = max(1, usable_cores() // 2)
    with spawn_pool(2, _record_thread_pools, (str(synthetic_db),)) as pool:
        assert {pool.submit(_recorded_thread_pools).result() for _ in range(4)} == {(share, share)}
        assert pool.submit(_recorded_memory_limit).result() == _memory_limit_of(WORKER_MEMORY)
    assert not any(name in os.environ for name in (*THREAD_SETTINGS, "EHRGYM_DUCKDB_MEMORY"))

    monkeypatch.setenv("POLARS_MAX_THREADS", "3")
    monkeypatch.setenv("EHRGYM_DUCKDB_MEMORY", "700MB")
    with spawn_pool(2, _record_thread_pools, (str(synthetic_db),)) as pool:
        assert pool.submit(_recorded_thread_pools).result() == (3, share)
        assert pool.submit(_recorded_memory_limit).result() == _memory_limit_of("700MB") != _memory_limit_of("2GB")
    assert os.environ["POLARS_MAX_THREADS"] == "3" and "EHRGYM_DUCKDB_THREADS" not in os.environ


def test_pair_workers_die_with_their_parent(synthetic_db: Path):
    """A build killed by SIGKILL (Airflow, the OOM killer) must not leave its workers running on."""
    import subprocess
    import sys
    import time

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import os, time
from pipeline.release.pairs import _start_worker
from pipeline.workers import spawn_pool
pool = spawn_pool(1, _start_worker, ({str(synthetic_db)!r}, {{}}, {{}}, 0, None))
print(pool.submit(os.getpid).result(), flush=True)
time.sleep(600)
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = int(parent.stdout.readline())
    parent.kill()
    parent.wait()

    def alive() -> bool:  # a zombie (exited, not yet reaped by init) is not running
        status = Path(f"/proc/{worker}/status")
        return status.exists() and "State:\tZ" not in status.read_text()

    deadline = time.monotonic() + 20
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(), f"worker {worker} outlived its killed parent"
