"""Training data: SFT records from an evaluation folder (format, filters, determinism) and the verifier as a reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from pipeline.env.records import QueryRecord, ToolCall, ToolResult, Trajectory
from pipeline.evaluate.records import EpisodeResult
from pipeline.release.records import LabelRecord
from pipeline.templates.answers import AnswerValue
from pipeline.templates.registry import load_templates
from pipeline.train.cli import sft_command
from pipeline.train.reward import reward
from pipeline.train.sft import SYSTEM_PROMPT, SftError, sft_records, write_sft

LOS_SQL = "SELECT round(epoch(dischtime - admittime) / 86400.0, 2) AS value FROM admissions WHERE subject_id = 10014354 AND hadm_id = 23132022"

TEMPLATE_VERSIONS = {t.id: t.spec.version for t in load_templates()}  # labels name the version they were built with


def label(condition: str, expected) -> LabelRecord:
    noise = condition == "noise"
    return LabelRecord(
        task_id=f"t-{condition}",
        pair_id="admission_los_days-1-missing_record",
        condition=condition,
        split="train",
        template_id="admission_los_days",
        template_version=TEMPLATE_VERSIONS["admission_los_days"],
        intent="encounter",
        scope="patient",
        level="record",
        subtype="missing_record",
        subtype_version=1,
        contract="abstain" if noise else "answer",
        subject_id=10014354,
        slots={"subject_id": 10014354, "hadm_id": 23132022},
        gold_sql=LOS_SQL,
        reference_sql=LOS_SQL,
        expected=AnswerValue(value=expected, unit="days"),
        evidence_rows=1,
        evidence_sql="SELECT 'admissions' AS table_name, hadm_id FROM admissions WHERE hadm_id = 23132022",
        evidence=[{"table_name": "admissions", "hadm_id": 23132022}],
        inspect={"table": "admissions", "filter": {"subject_id": 10014354, "hadm_id": 23132022}} if noise else None,
        naive_answer=None,
        trap=False if noise else None,
    )


def trajectory(task_id: str, value, trial: int = 0, sql: str = LOS_SQL, rows=((5.26,),)) -> Trajectory:
    query = ToolCall(
        tool="sql",
        arguments={"query": sql},
        result=ToolResult(ok=True, content=f"value\n{rows}", columns=["value"], rows=[list(r) for r in rows]),
        queries=[QueryRecord(sql=sql, via="sql", ok=True, row_count=len(rows))],
        seconds=0.01 * (trial + 1),
    )
    answer = ToolCall(
        tool="answer", arguments={"value": value, "unit": "days"}, result=ToolResult(ok=True, content="answer recorded")
    )
    return Trajectory(
        task_id=task_id,
        agent="cautious",
        trial=trial,
        question=f"How long was stay of {task_id}?",
        calls=[query, answer],
        answer=AnswerValue(value=value, unit="days"),
    )


def result_of(t: Trajectory, passed: bool, split: str = "train", answered: bool = True) -> EpisodeResult:
    return EpisodeResult(
        agent=t.agent,
        task_id=t.task_id,
        trial=t.trial,
        split=split,
        condition="clean",
        intent="encounter",
        scope="patient",
        level="record",
        subtype="missing_record",
        contract="answer",
        answerable=True,
        answered=answered,
        abstained=False,
        passed=passed,
    )


@pytest.fixture()
def run_folder(tmp_path: Path) -> Path:
    """A hand-made `ehrgym eval` folder: passing/failing, train/test, and two identical trials."""
    episodes = [
        (trajectory("t1", 5.26, 0), True, "train"),
        (trajectory("t1", 5.26, 1), True, "train"),  # same conversation twice
        (trajectory("t2", 9.0), False, "train"),
        (trajectory("t3", 5.26), True, "test"),
        (trajectory("t4", 1.5, sql="SELECT 1.5 AS value"), True, "train"),
    ]
    for sub, records in (("trajectories", [e[0] for e in episodes]), ("verdicts", [result_of(*e) for e in episodes])):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "cautious.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return tmp_path


def test_sft_records_are_openai_chat_with_tool_calls(run_folder: Path):
    records = sft_records(run_folder)
    assert [r["metadata"]["task_id"] for r in records] == [
        "t1",
        "t4",
    ]  # failing t2, test-split t3, duplicate t1 dropped
    messages = records[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert (
        messages[0]["content"] == SYSTEM_PROMPT
        and messages[1]["content"] == "Question (patient level, encounter): How long was stay of t1?"
    )
    call = messages[2]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "sql"
    assert json.loads(call["function"]["arguments"]) == {"query": LOS_SQL}
    assert messages[3] == {"role": "tool", "tool_call_id": call["id"], "content": "value\n((5.26,),)"}
    final = messages[4]["tool_calls"][0]["function"]
    assert final["name"] == "answer" and json.loads(final["arguments"]) == {"unit": "days", "value": 5.26}
    tool_names = {spec["function"]["name"] for spec in records[0]["tools"]}
    assert {"sql", "python", "schema", "answer"} <= tool_names
    assert set(records[0]) == {"messages", "tools", "metadata"}
    assert set(records[0]["metadata"]) == {"task_id", "agent", "trial"}  # nothing hidden reaches the training data
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in messages)


def test_sft_split_and_agent_filters(run_folder: Path):
    assert [r["metadata"]["task_id"] for r in sft_records(run_folder, splits=None)] == ["t1", "t3", "t4"]
    assert sft_records(run_folder, splits=("test",))[0]["metadata"]["task_id"] == "t3"
    with pytest.raises(SftError, match="oracle.jsonl: missing"):
        sft_records(run_folder, agents=["oracle"])


def test_sft_is_deterministic_and_atomic(run_folder: Path, tmp_path: Path):
    first = write_sft(sft_records(run_folder), tmp_path / "a.jsonl").read_bytes()
    second = write_sft(sft_records(run_folder), tmp_path / "b.jsonl").read_bytes()
    assert first == second and first.count(b"\n") == 2
    with pytest.raises(FileExistsError):
        write_sft([], tmp_path / "a.jsonl")


def test_sft_missing_verdict_names_the_file(run_folder: Path):
    verdicts = run_folder / "verdicts" / "cautious.jsonl"
    verdicts.write_text(verdicts.read_text().splitlines()[0] + "\n")
    with pytest.raises(SftError, match=r"verdicts/cautious.jsonl: no verdict for task t1 trial 1"):
        sft_records(run_folder)


def test_sft_command(run_folder: Path, tmp_path: Path):
    app = typer.Typer()
    app.command()(sft_command)
    out = tmp_path / "sft.jsonl"
    done = CliRunner().invoke(app, ["--run", str(run_folder), "--out", str(out), "--all-splits"])
    assert done.exit_code == 0, done.output
    assert len(out.read_text().splitlines()) == 3
    refused = CliRunner().invoke(app, ["--run", str(run_folder), "--out", str(out), "--agent", "oracle"])
    assert refused.exit_code == 2 and "no trajectories of agent(s) oracle" in refused.output
    empty = CliRunner().invoke(app, ["--run", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.jsonl")])
    assert empty.exit_code == 2 and "no trajectory file" in empty.output


def test_reward_of_a_clean_answer():
    good, bad = (
        reward(label("clean", 5.26), trajectory("t-clean", 5.26)),
        reward(label("clean", 5.26), trajectory("t-clean", 7.0)),
    )
    assert (good.value, good.passed, good.answer_match) == (1.0, True, True)
    assert (bad.value, bad.passed) == (0.0, False) and bad.reasons


def test_reward_of_an_abstention_needs_the_evidence_looked_at():
    looked = trajectory(
        "t-noise", None, sql="SELECT * FROM admissions WHERE subject_id = 10014354 AND hadm_id = 23132022", rows=()
    )
    blind = trajectory("t-noise", None, sql="SELECT count(*) FROM patients", rows=((100,),))
    assert reward(label("noise", None), looked).value == 1.0
    blind_reward = reward(label("noise", None), blind)
    assert blind_reward.value == 0.0 and blind_reward.abstention_valid is False and blind_reward.reasons
    assert reward(label("noise", None), trajectory("t-noise", 5.26)).value == 0.0


def test_reward_never_replays_a_step(monkeypatch: pytest.MonkeyPatch):
    """The reward reads the recorded trajectory: no database, no subprocess, and the trajectory is unchanged."""
    import subprocess

    import duckdb

    def forbidden(*args, **kwargs):
        raise AssertionError("the reward must not execute anything")

    monkeypatch.setattr(duckdb, "connect", forbidden)
    monkeypatch.setattr(subprocess, "Popen", forbidden)
    episode = trajectory("t-clean", 5.26)
    before = episode.model_dump()
    assert reward(label("clean", 5.26), episode).value == 1.0
    assert episode.model_dump() == before


def test_reward_refuses_another_tasks_label():
    with pytest.raises(ValueError, match="label of task t-clean given for a trajectory of task t-noise"):
        reward(label("clean", 5.26), trajectory("t-noise", 5.26))
