"""The Airflow DAGs run for real (`airflow dags test`, SQLite metadata DB): they import cleanly, publish releases
whose manifests match their files, honour the ablation Params, rerun without a second release, and survive a kill.

Airflow runs in subprocesses, each with AIRFLOW_HOME in a temporary folder, so nothing here imports Airflow into
the pytest process and no setting leaks between tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
AIRFLOW = Path(sys.executable).parent / "airflow"
SOURCE = {"patients": 200, "source_seed": 1}  # the rebuild generates this synthetic source itself
SMALL = {"intents": ["vital_signs"], "per_template": 1, "seed": 3}
ABLATION_SUBTYPES = ["null_value", "implausible_value"]
pytestmark = pytest.mark.slow  # an Airflow metadata DB migration and five `airflow dags test` runs


def _airflow(env: dict[str, str], *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(AIRFLOW), *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _dags_test(env: dict[str, str], dag_id: str, conf: dict) -> subprocess.CompletedProcess:
    result = _airflow(env, "dags", "test", dag_id, "-c", json.dumps(conf))
    assert result.returncode == 0 and "DagRun failed" not in result.stdout + result.stderr, (
        result.stdout + result.stderr
    )[-6000:]
    return result


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A migrated SQLite metadata DB in a temporary AIRFLOW_HOME, with the project's dags/ as the DAG folder."""
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "GX_ANALYTICS_ENABLED": "false",
        "EHRGYM_DATA": str(home / "unused"),
    }
    migrated = _airflow(env, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def rebuilt(airflow_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data folder of one rebuild run on a 200-patient synthetic source; its release is `weekly`."""
    data = tmp_path_factory.mktemp("data")
    _dags_test(airflow_env, "ehrgym_rebuild", {**SOURCE, **SMALL, "data_dir": str(data), "version": "weekly"})
    return data


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _assert_manifest_matches_files(release: Path) -> dict:
    manifest = json.loads((release / "manifest.json").read_text())
    files = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == files
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == entry["sha256"], name
    noise = [lab for lab in _jsonl(release / "labels.jsonl") if lab["condition"] == "noise"]
    counted: dict[str, Counter] = {}
    for lab in noise:
        counted.setdefault(lab["split"], Counter())[
            f"{lab['intent']}/{lab['scope']}/{lab['level']}/{lab['subtype']}"
        ] += 1
    assert manifest["pairs"]["counts"] == {split: dict(c) for split, c in counted.items()}
    assert manifest["pairs"]["published"] == len(noise) == len(_jsonl(release / "patches" / "patches.jsonl")) > 0
    assert len(_jsonl(release / "tasks.jsonl")) == 2 * len(noise)
    return manifest


def _file_states(root: Path) -> dict[str, tuple[str, int]]:
    return {
        p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def _releases(data: Path) -> list[str]:
    return sorted(os.listdir(data / "releases"))


def _visible_releases(data: Path) -> list[str]:
    return [name for name in _releases(data) if not name.startswith(".")]


def test_every_dag_imports_with_tags_and_retries(airflow_env: dict[str, str]):
    script = f"""
import json
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag
bag = BundleDagBag(dag_folder={str(DAGS)!r}, bundle_path=Path({str(DAGS)!r}))
print(json.dumps({{"errors": bag.import_errors, "dags": {{d.dag_id: {{"tags": sorted(d.tags), "params": sorted(d.params),
    "tasks": {{t.task_id: t.retries for t in d.tasks}}, "upstream": {{t.task_id: sorted(t.upstream_task_ids) for t in d.tasks}}}}
    for d in bag.dags.values()}}}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], env=airflow_env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    bag = json.loads(result.stdout.strip().splitlines()[-1])
    assert bag["errors"] == {} and set(bag["dags"]) == {"ehrgym_rebuild", "ehrgym_ablation"}
    for dag in bag["dags"].values():
        assert {"ehrgym", "release"} <= set(dag["tags"]) and all(r >= 1 for r in dag["tasks"].values())
        assert dag["upstream"]["publish"] == ["assemble", "pair_gate", "prepare"] and dag["upstream"]["pairs"] == [
            "instantiate",
            "prepare",
        ]
    assert {"source", "patients", "source_seed", "intents"} <= set(bag["dags"]["ehrgym_rebuild"]["params"])
    assert {"levels", "subtypes", "intents", "scopes", "pairs_per_cell", "seed", "name"} <= set(
        bag["dags"]["ehrgym_ablation"]["params"]
    )


def test_the_dag_tasks_follow_the_declared_stage_order(airflow_env: dict[str, str]):
    from pipeline.stage_table import STAGE_TABLE, STAGES

    script = f"""
import json
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag
dag = BundleDagBag(dag_folder={str(DAGS)!r}, bundle_path=Path({str(DAGS)!r})).dags["ehrgym_ablation"]
print(json.dumps([[t.task_id for t in dag.topological_sort()], {{t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}}]))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], env=airflow_env, capture_output=True, text=True, timeout=300
    )
    order, upstream = json.loads(result.stdout.strip().splitlines()[-1])
    # each stage task waits for exactly the stages whose outputs it takes and those it waits for (the table's edges),
    # plus `shards` for the first mapped stage and the config task for `prepare`
    producer = {stage.output: stage.name for stage in STAGE_TABLE}
    for stage in STAGE_TABLE:
        wanted = {producer[i] for i in stage.inputs if i in producer} | set(stage.after)
        assert set(upstream[stage.name]) - {"shards", "ablation_config"} == wanted, stage.name
    stage_tasks = [task for task in order if task in STAGES]
    assert set(stage_tasks) == set(STAGES)
    # source_gate and fingerprint are independent of each other; every other pair keeps the declared order
    rank = {stage: i for i, stage in enumerate(STAGES)}
    assert all(
        rank[a] < rank[b] or {a, b} == {"source_gate", "fingerprint"} for a, b in zip(stage_tasks, stage_tasks[1:])
    )


def test_run_stages_walks_the_table_mapping_per_shard_stages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """One process follows the same table: every stage in order with the outputs it names, per-shard stages once
    per shard; a skipped gate is left out; only gates can be skipped."""
    from pipeline import stages
    from pipeline.build import BuildConfig
    from pipeline.stage_table import STAGE_TABLE

    calls = []
    for stage in STAGE_TABLE:

        def fake(*args, _name=stage.name, **kwargs):
            calls.append((_name, args))
            return f"{_name}{len(calls)}"

        monkeypatch.setattr(stages, stage.function, fake)
    db = tmp_path / "x.duckdb"
    db.touch()
    config = BuildConfig(db=db, releases_dir=tmp_path, version="v")
    assert stages.run_stages(config, shards=["a", "b"]) == f"publish{len(calls)}"
    names = [name for name, _ in calls]
    assert names == [
        "prepare",
        "source_gate",
        "fingerprint",
        "instantiate",
        "instantiate",
        "pairs",
        "pairs",
        "fill",
        "assemble",
        "pair_gate",
        "publish",
    ]
    args = dict(zip([f"{n}{i}" for i, n in enumerate(names, 1)], [a for _, a in calls]))
    assert args["instantiate4"] == ("prepare1", "a") and args["instantiate5"] == ("prepare1", "b")
    assert args["pairs6"] == ("prepare1", "instantiate4") and args["pairs7"] == ("prepare1", "instantiate5")
    assert args["fill8"] == ("prepare1", ["instantiate4", "instantiate5"], ["pairs6", "pairs7"])
    shards = (["instantiate4", "instantiate5"], ["pairs6", "pairs7"])
    assert args["assemble9"] == ("prepare1", "fingerprint3", *shards, "fill8")
    calls.clear()
    stages.run_stages(config, skip=("source_gate",))
    assert "source_gate" not in [name for name, _ in calls]
    with pytest.raises(ValueError, match="only gates can be skipped"):
        stages.run_stages(config, skip=("fingerprint",))


def test_a_stage_table_with_an_input_from_nowhere_is_refused():
    from pipeline.stage_table import STAGE_TABLE, Stage, check_table

    with pytest.raises(ValueError, match="'pairs'.*tasks"):
        check_table((STAGE_TABLE[0], Stage("pairs", "pair_shard", ("work", "tasks"), "pairs", per_shard=True)))


def test_rebuild_publishes_a_release_whose_manifest_counts_match_its_files(rebuilt: Path):
    assert _releases(rebuilt) == ["weekly"]  # the work folder is gone once the release is in place
    manifest = _assert_manifest_matches_files(rebuilt / "releases" / "weekly")
    assert manifest["source"]["patients"] == SOURCE["patients"] and manifest["config"]["intents"] == SMALL["intents"]
    assert (rebuilt / "synthetic-200-seed1.duckdb").is_file()


def test_rebuild_emits_an_asset_event_for_the_release(rebuilt: Path, airflow_env: dict[str, str]):
    with sqlite3.connect(Path(airflow_env["AIRFLOW_HOME"]) / "airflow.db") as db:
        events = db.execute(
            "SELECT a.name, a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id"
        ).fetchall()
    release = (rebuilt / "releases" / "weekly").resolve()
    assert ("ehrgym-release-weekly", release.as_uri()) in {(name, uri) for name, uri, _ in events}
    assert all(
        json.loads(extra)["path"] == str(release) for name, _, extra in events if name == "ehrgym-release-weekly"
    )


def test_rerunning_the_same_run_neither_adds_a_release_nor_changes_it(rebuilt: Path, airflow_env: dict[str, str]):
    release = rebuilt / "releases" / "weekly"
    before = _file_states(release)
    _dags_test(airflow_env, "ehrgym_rebuild", {**SOURCE, **SMALL, "data_dir": str(rebuilt), "version": "weekly"})
    assert _releases(rebuilt) == ["weekly"] and _file_states(release) == before


def test_ablation_publishes_only_the_selected_level_and_subtypes(rebuilt: Path, airflow_env: dict[str, str]):
    conf = {
        "name": "value-pair",
        "source_db": str(rebuilt / "synthetic-200-seed1.duckdb"),
        "levels": ["value"],
        "subtypes": ABLATION_SUBTYPES,
        "data_dir": str(rebuilt),
        **SMALL,
    }
    _dags_test(airflow_env, "ehrgym_ablation", conf)
    release = rebuilt / "releases" / "ablation-value-pair"
    manifest = _assert_manifest_matches_files(release)
    labels = _jsonl(release / "labels.jsonl")
    assert {lab["level"] for lab in labels} == {"value"} and {lab["subtype"] for lab in labels} <= set(
        ABLATION_SUBTYPES
    )
    assert sorted(manifest["subtypes"]) == sorted(ABLATION_SUBTYPES) and manifest["config"]["levels"] == ["value"]
    assert _visible_releases(rebuilt) == ["ablation-value-pair", "weekly"]


def _wait_for_mapped_outputs(data: Path, proc: subprocess.Popen, timeout: float = 600) -> list[Path]:
    """The pair-shard outputs written so far, once there is at least one (the run is then mid-way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # a finished output, not a shard's temporary sibling (`.<name>.tmp-<pid>`, atomic_output) being written
        done = sorted(p for p in (data / "releases" / ".work").glob("*/pairs/*") if not p.name.startswith("."))
        if done or proc.poll() is not None:
            return done
        time.sleep(0.2)
    return []


def test_a_killed_run_leaves_no_release_and_a_rerun_completes(rebuilt: Path, airflow_env: dict[str, str]):
    from pipeline.build import BuildConfig
    from pipeline.stages import shard_names

    conf = {**SOURCE, **SMALL, "template_shards": 3, "data_dir": str(rebuilt), "version": "interrupted"}
    shards = shard_names(
        BuildConfig(db=rebuilt / "unused.duckdb", releases_dir=rebuilt, version="v", intents=SMALL["intents"]), 3
    )
    before = _visible_releases(rebuilt)
    proc = subprocess.Popen(
        [str(AIRFLOW), "dags", "test", "ehrgym_rebuild", "-c", json.dumps(conf)],
        env=airflow_env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        finished = _wait_for_mapped_outputs(rebuilt, proc)
        assert proc.poll() is None, "the run ended before it could be killed mid-way"
        assert finished and len(finished) < len(shards) == 3, f"expected some but not all of {shards}, got {finished}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _visible_releases(rebuilt) == before and not (rebuilt / "releases" / "interrupted").exists()
    assert all((path / "pairs.jsonl").is_file() for path in finished)  # mapped outputs are whole or absent
    _dags_test(airflow_env, "ehrgym_rebuild", conf)
    assert _visible_releases(rebuilt) == sorted([*before, "interrupted"])
    _assert_manifest_matches_files(rebuilt / "releases" / "interrupted")
