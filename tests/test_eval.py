"""`ehrgym eval` end to end on a small synthetic release: outputs, numbers consistent with the verdicts, determinism,
errors (the baseline agents on the real demo: tests/test_agents.py)."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest
import typer
from typer.testing import CliRunner

from pipeline.build import BuildConfig
from pipeline.env.testing import _NoGate
from pipeline.evaluate.cli import eval_command
from pipeline.evaluate.evaluation import evaluate
from pipeline.evaluate.runner import EvalConfig
from pipeline.stages import run_build

SUBTYPES = [
    "missing_record",
    "displaced_time",
    "null_value",
    "implausible_value",
    "unit_mismatch",
    "nonexistent_entity",
    "unknown_concept",
]
AGENTS = ["oracle", "literal"]
K = 2


@pytest.fixture(scope="module")
def db(synthetic_db: Path) -> Path:
    return synthetic_db


@pytest.fixture(scope="module")
def release_dir(db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = BuildConfig(
        db=db,
        releases_dir=tmp_path_factory.mktemp("releases"),
        version="eval-test",
        per_template=2,
        seed=1,
        intents=["encounter", "laboratory", "vital_signs"],
        subtypes=SUBTYPES,
        test_size=6,
    )
    return run_build(config, gate=_NoGate)  # the pair gate is not under test here (tests/test_build.py runs it)


@pytest.fixture(scope="module")
def release(release_dir: Path, db: Path):
    from pipeline.env.release import Release

    opened = Release.open(release_dir, db)
    yield opened
    opened.close()  # an open release keeps the source file's locked DuckDB instance alive for later modules


def config_for(release_dir: Path, db: Path, **kw) -> EvalConfig:
    return EvalConfig(release_dir=release_dir, db=db, **{"agents": AGENTS, "k": K, "workers": 1, **kw})


@pytest.fixture(scope="module")
def run(release, release_dir: Path, db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "run"
    evaluate(release, config_for(release_dir, db), out)
    return out


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_outputs_written(run: Path, release):
    n_tasks = len(release.tasks())
    for agent in AGENTS:
        trajectories, verdicts = (
            jsonl(run / "trajectories" / f"{agent}.jsonl"),
            jsonl(run / "verdicts" / f"{agent}.jsonl"),
        )
        assert len(trajectories) == len(verdicts) == n_tasks * K
        assert [(t["task_id"], t["trial"]) for t in trajectories] == [(v["task_id"], v["trial"]) for v in verdicts]
        assert [t["task_id"] for t in trajectories[::K]] == [
            t.task_id for t in release.tasks()
        ]  # task order, then trial
        assert all(t["calls"] for t in trajectories)
    metrics = json.loads((run / "metrics.json").read_text())
    assert (
        metrics["run"]["agents"] == AGENTS
        and set(metrics["agents"]) == set(AGENTS)
        and metrics["run"]["k"] == K
        and metrics["run"]["tasks"] == n_tasks
    )
    timing = json.loads((run / "timing.json").read_text())
    assert timing["agents"]["oracle"]["episodes"] == n_tasks * K


def _pass1(verdicts: list[dict], keep) -> float:
    per_task = defaultdict(list)
    for v in verdicts:
        if keep(v):
            per_task[v["task_id"]].append(v["passed"])
    return sum(sum(p) / len(p) for p in per_task.values()) / len(per_task)


def _rs(verdicts: list[dict], c: int) -> float:
    def score(v):
        if not v["answered"]:
            return 0
        if v["abstained"]:
            return 0 if v["answerable"] else 1
        return 1 if v["answerable"] and v["passed"] else -c

    return sum(map(score, verdicts)) / len(verdicts)


@pytest.mark.parametrize("agent", AGENTS)
def test_metrics_agree_with_the_verdicts(run: Path, agent: str):
    verdicts = jsonl(run / "verdicts" / f"{agent}.jsonl")
    overall = json.loads((run / "metrics.json").read_text())["agents"][agent]["overall"]
    clean = _pass1(verdicts, lambda v: v["condition"] == "clean")
    noise = _pass1(verdicts, lambda v: v["condition"] == "noise")
    assert overall["pass1_clean"] == pytest.approx(clean) and overall["pass1_noise"] == pytest.approx(noise)
    assert overall["gap"] == pytest.approx(clean - noise)
    for c in (0, 5, 10):
        assert overall["all"]["rs"][str(c)] == pytest.approx(_rs(verdicts, c))
    all_pass = defaultdict(list)
    for v in verdicts:
        all_pass[v["task_id"]].append(v["passed"])
    assert overall["all"]["pass_hat_k"][str(K)] == pytest.approx(sum(all(p) for p in all_pass.values()) / len(all_pass))
    assert overall["all"]["pass_at_k"][str(K)] == pytest.approx(sum(any(p) for p in all_pass.values()) / len(all_pass))


def test_breakdowns_count_clean_tasks_under_their_pairs(run: Path):
    verdicts = jsonl(run / "verdicts" / "literal.jsonl")
    by = json.loads((run / "metrics.json").read_text())["agents"]["literal"]["by"]
    assert set(by["subtype"]) == {v["subtype"] for v in verdicts} and set(by["level"]) == {v["level"] for v in verdicts}
    for subtype, group in by["subtype"].items():
        mine = [v for v in verdicts if v["subtype"] == subtype]
        assert group["clean"]["tasks"] == group["noise"]["tasks"] == len({v["task_id"] for v in mine}) // 2
        assert group["pass1_noise"] == pytest.approx(_pass1(mine, lambda v: v["condition"] == "noise"))


def test_oracle_passes_everything(run: Path):
    overall = json.loads((run / "metrics.json").read_text())["agents"]["oracle"]["overall"]
    failures = [v for v in jsonl(run / "verdicts" / "oracle.jsonl") if not v["passed"]]
    assert not failures, failures[:3]
    assert overall["pass1_clean"] == overall["pass1_noise"] == 1.0


def test_report_is_self_contained(run: Path):
    html = (run / "report.html").read_text()
    assert html.count("<svg") >= 7  # overall, RS, pass^k, and one per breakdown field
    assert "src=" not in html and "<link" not in html and "<script" not in html
    for agent in AGENTS:
        assert f"<td>{agent}</td>" in html
    assert "unit_mismatch" in html and "Pass@1 Noise" in html


def _without_seconds(path: Path) -> list[dict]:
    rows = jsonl(path)
    for row in rows:
        for call in row["calls"]:
            call.pop("seconds")
    return rows


def test_rerun_with_a_worker_pool_is_identical(run: Path, release, release_dir: Path, db: Path, tmp_path: Path):
    again = tmp_path / "again"
    evaluate(release, config_for(release_dir, db, workers=2), again)
    for name in ("metrics.json", "report.html", "verdicts/oracle.jsonl", "verdicts/literal.jsonl"):
        assert (again / name).read_bytes() == (run / name).read_bytes(), name
    for agent in AGENTS:
        assert _without_seconds(again / "trajectories" / f"{agent}.jsonl") == _without_seconds(
            run / "trajectories" / f"{agent}.jsonl"
        )


def test_split_and_out_rules(run: Path, release, release_dir: Path, db: Path, tmp_path: Path):
    out = tmp_path / "test-split"
    metrics = evaluate(release, config_for(release_dir, db, agents=["oracle"], k=1, split="test"), out)
    assert metrics["run"]["tasks"] == len(release.tasks("test")) < len(release.tasks())
    assert {v["split"] for v in jsonl(out / "verdicts" / "oracle.jsonl")} == {"test"}
    with pytest.raises(FileExistsError, match="not empty; pass --overwrite"):
        evaluate(release, config_for(release_dir, db, agents=["oracle"], k=1, split="test"), out)
    evaluate(release, config_for(release_dir, db, agents=["literal"], k=1, split="test"), out, overwrite=True)
    assert sorted(p.name for p in (out / "verdicts").iterdir()) == ["literal.jsonl"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary or set-aside folder left
    with pytest.raises(ValueError, match="no split 'dev'"):
        evaluate(release, config_for(release_dir, db, split="dev"), tmp_path / "dev")
    assert not (tmp_path / "dev").exists()


@pytest.fixture(scope="module")
def db_copy(db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The source under another path: the CLI opens its own Release while the module's stays open."""
    copy = tmp_path_factory.mktemp("dbcopy") / "source.duckdb"
    shutil.copy(db, copy)
    return copy


@pytest.fixture(scope="module")
def cli():
    app = typer.Typer()
    app.command()(eval_command)
    return lambda *args: CliRunner().invoke(app, [str(a) for a in args])


def test_cli_runs_and_prints_the_summary(cli, release_dir: Path, db_copy: Path, tmp_path: Path):
    done = cli(
        "--release",
        release_dir,
        "--db",
        db_copy,
        "--agent",
        "oracle,literal",
        "--k",
        1,
        "--out",
        tmp_path / "o",
        "--split",
        "test",
        "--workers",
        1,
    )
    assert done.exit_code == 0, done.output
    assert "oracle" in done.output and "100.0%" in done.output and (tmp_path / "o" / "report.html").is_file()
    no_split = cli(
        "--release", release_dir, "--db", db_copy, "--agent", "oracle", "--out", tmp_path / "dev", "--split", "dev"
    )
    assert no_split.exit_code == 2 and "no split 'dev'" in no_split.output and not (tmp_path / "dev").exists()


def test_cli_errors(cli, release_dir: Path, db: Path, tmp_path: Path):
    common = ("--k", 1, "--out", tmp_path / "o")
    unknown = cli("--release", release_dir, "--db", db, "--agent", "oracle,wizard", *common)
    assert unknown.exit_code == 2 and "unknown agent(s) wizard" in unknown.output and "oracle" in unknown.output
    missing = cli("--release", tmp_path / "nowhere", "--db", db, "--agent", "oracle", *common)
    assert missing.exit_code == 2 and "not a release folder" in missing.output
    no_db = cli("--release", release_dir, "--db", tmp_path / "none.duckdb", "--agent", "oracle", *common)
    assert no_db.exit_code == 2 and "no such source database" in no_db.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    busy = cli("--release", release_dir, "--db", db, "--agent", "oracle", "--out", tmp_path / "full")
    assert busy.exit_code == 2 and "--overwrite" in busy.output and (tmp_path / "full" / "x").read_text() == "keep me"
    assert not (tmp_path / "o").exists()


def test_cli_refuses_a_source_with_another_fingerprint(cli, release_dir: Path, db: Path, tmp_path: Path):
    other = tmp_path / "other.duckdb"
    shutil.copy(db, other)
    with duckdb.connect(str(other)) as con:
        con.execute("DELETE FROM labevents WHERE labevent_id = (SELECT min(labevent_id) FROM labevents)")
    refused = cli("--release", release_dir, "--db", other, "--agent", "oracle", "--k", 1, "--out", tmp_path / "o")
    assert refused.exit_code == 2 and "cannot open release" in refused.output and str(other) in refused.output
    assert not (tmp_path / "o").exists()


class Crashing:
    """Not a registered agent: an object with the agent interface whose run fails half-way."""

    name = "crashing"

    def run(self, episode, context, seed: int = 0) -> None:
        episode.call("schema", {})
        raise RuntimeError("model endpoint went away")


def test_a_crashing_agent_fails_its_episode_not_the_run(release):
    from pipeline.evaluate.runner import run_trial

    task_id = release.tasks()[0].task_id
    trajectory, result = run_trial(release, Crashing(), task_id, trial=0, seed=0, max_turns=5)
    assert [c.tool for c in trajectory.calls] == ["schema"] and trajectory.answer is None
    assert not result.passed and not result.answered
    assert "agent crashing raised RuntimeError: model endpoint went away" in result.reasons


def test_agent_options_parse_json_values_and_name_the_agent():
    from pipeline.evaluate.cli import parse_options

    assert parse_options(["llm.max_turns=5", "llm.model=gpt-4o-mini", "llm.temperature=0.5"], ["llm"]) == {
        "llm": {"max_turns": 5, "model": "gpt-4o-mini", "temperature": 0.5}
    }
    with pytest.raises(typer.Exit):
        parse_options(["llm.model=x"], ["oracle"])
    with pytest.raises(typer.Exit):
        parse_options(["model=x"], ["llm"])


def test_cli_names_a_bad_agent_option(cli, release_dir: Path, db: Path, tmp_path: Path):
    bad = cli(
        "--release",
        release_dir,
        "--db",
        db,
        "--agent",
        "oracle",
        "--out",
        tmp_path / "o",
        "--agent-option",
        "llm.model=x",
    )
    assert bad.exit_code == 2 and "names agent 'llm', which is not among --agent oracle" in bad.output
