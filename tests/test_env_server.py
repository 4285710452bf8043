"""The gymnasium env (`EHRRobustGym-v0`) and the HTTP server over the same episode API."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from fastapi.testclient import TestClient

from pipeline.env.gym_env import ENV_ID, EHRRobustGymEnv
from pipeline.env.release import Release
from pipeline.env.server import create_app


@pytest.fixture(scope="module")
def release(synthetic_small_release_dir: Path, synthetic_db: Path):
    """The session's small synthetic release (tests/conftest.py), opened for this module."""
    with Release.open(synthetic_small_release_dir, synthetic_db) as opened:
        yield opened


@pytest.fixture(scope="module")
def client(release: Release):
    return TestClient(create_app(release))


def _clean_task(release: Release) -> str:
    return next(t.task_id for t in release.tasks() if release.label(t.task_id).condition == "clean")


def test_env_is_registered_and_made_by_id(release: Release):
    env = gym.make(ENV_ID, release=release)
    obs, info = env.reset(seed=3)
    assert obs["task_id"] == info["task_id"] in {t.task_id for t in release.tasks()}
    assert env.reset(seed=3)[1] == info  # the same seed picks the same task
    env.close()


def test_answering_the_expected_value_terminates_with_reward_one(release: Release):
    env, task_id = EHRRobustGymEnv(release=release), _clean_task(release)
    obs, _ = env.reset(options={"task_id": task_id})
    label = release.label(task_id)
    obs, reward, terminated, truncated, _ = env.step({"tool": "sql", "arguments": {"query": label.reference_sql}})
    assert obs["result"]["ok"] and (reward, terminated, truncated) == (0.0, False, False)
    expected = label.expected.model_dump()
    _, reward, terminated, truncated, _ = env.step({"tool": "answer", "arguments": expected})
    assert (reward, terminated, truncated) == (1.0, True, False)
    env.reset(options={"task_id": task_id})
    _, reward, terminated, _, _ = env.step({"tool": "answer", "arguments": {"value": "certainly not this"}})
    assert (reward, terminated) == (0.0, True)
    env.close()


def test_running_out_of_turns_is_truncation(release: Release):
    env = EHRRobustGymEnv(release=release, max_turns=2)
    env.reset(options={"task_id": _clean_task(release)})
    assert env.step({"tool": "schema", "arguments": {}})[3] is False
    obs, reward, terminated, truncated, _ = env.step({"tool": "bogus", "arguments": {}})
    assert (reward, terminated, truncated) == (0.0, False, True) and obs["result"]["content"].startswith("Error:")
    env.close()


def test_server_lists_tasks_without_labels(client: TestClient, release: Release):
    reply = client.get("/tasks")
    assert reply.status_code == 200 and [t["task_id"] for t in reply.json()] == [t.task_id for t in release.tasks()]
    assert all(set(t) == {"task_id", "question", "scope", "intent", "split", "answer_format"} for t in reply.json())
    assert client.get("/tasks", params={"split": "nope"}).status_code == 404
    paths = {route.path for route in client.app.routes}
    assert not any("label" in path for path in paths)


def test_server_runs_an_episode_to_its_end(client: TestClient, release: Release):
    task_id = _clean_task(release)
    created = client.post("/episodes", json={"task_id": task_id}).json()
    episode_id, observation = created["episode_id"], created["observation"]
    assert observation["task_id"] == task_id and len(observation["tools"]) == 4
    step = client.post(f"/episodes/{episode_id}/step", json={"tool": "sql", "arguments": {"query": "SELECT 1 AS a"}})
    assert step.json()["result"]["rows"] == [[1]] and step.json()["done"] is False
    bad = client.post(f"/episodes/{episode_id}/step", json={"tool": "sql", "arguments": {"query": "DROP TABLE x"}})
    assert bad.json()["result"]["ok"] is False and bad.json()["result"]["content"].startswith("Error:")
    done = client.post(f"/episodes/{episode_id}/step", json={"tool": "answer", "arguments": {"value": None}})
    assert done.json()["done"] is True
    trajectory = client.get(f"/episodes/{episode_id}/trajectory").json()
    assert [c["tool"] for c in trajectory["calls"]] == ["sql", "sql", "answer"]
    assert release.label(task_id).pair_id not in json.dumps(trajectory)
    assert client.delete(f"/episodes/{episode_id}").json() == {"closed": True}
    assert client.post(f"/episodes/{episode_id}/step", json={"tool": "schema"}).status_code == 404


def test_server_refuses_unknown_tasks_and_malformed_bodies(client: TestClient):
    assert client.post("/episodes", json={"task_id": "t-nope"}).status_code == 404
    assert client.post("/episodes", json={"task_id": "x", "cheat": True}).status_code == 422


def test_serve_command_refuses_a_folder_that_is_no_release(tmp_path: Path):
    import typer
    from typer.testing import CliRunner

    from pipeline.env.cli import serve_command

    app = typer.Typer()
    app.command()(serve_command)
    result = CliRunner().invoke(app, [str(tmp_path), "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 2 and "no manifest.json" in (result.output + (result.stderr or ""))
