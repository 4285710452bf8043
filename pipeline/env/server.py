"""HTTP server exposing the episode API to remote agents and trainers; no route reaches a label."""

from __future__ import annotations

import secrets
import threading
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from pipeline.env.episode import Episode
from pipeline.env.records import ToolResult, Trajectory
from pipeline.env.release import Release
from pipeline.release.records import TaskRecord

MAX_OPEN_EPISODES = 256


class NewEpisode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    max_turns: int = Field(30, ge=1, le=200)


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any] = {}


class StepReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    result: ToolResult
    done: bool


class _Episodes:
    """Open episodes by id, each with its own lock (a DuckDB cursor serves one call at a time)."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[Episode, threading.Lock]] = {}
        self.lock = threading.Lock()

    def add(self, episode: Episode) -> str:
        with self.lock:
            if len(self.items) >= MAX_OPEN_EPISODES:
                episode.close()
                raise HTTPException(429, f"at most {MAX_OPEN_EPISODES} open episodes; DELETE finished ones")
            episode_id = secrets.token_hex(12)
            self.items[episode_id] = (episode, threading.Lock())
        return episode_id

    def get(self, episode_id: str) -> tuple[Episode, threading.Lock]:
        with self.lock:
            if episode_id not in self.items:
                raise HTTPException(404, f"no open episode {episode_id!r}")
            return self.items[episode_id]

    def pop(self, episode_id: str) -> Episode:
        with self.lock:
            if episode_id not in self.items:
                raise HTTPException(404, f"no open episode {episode_id!r}")
            return self.items.pop(episode_id)[0]


def create_app(release: Release) -> FastAPI:
    """The app serving one opened release."""
    app, episodes = FastAPI(title="EHR-RobustGym environment", version=release.version), _Episodes()

    @app.get("/tasks", response_model=list[TaskRecord])
    def tasks(split: str | None = None) -> list[TaskRecord]:
        try:
            return release.tasks(split)
        except ValueError as err:
            raise HTTPException(404, str(err)) from None

    @app.post("/episodes")
    def new_episode(body: NewEpisode) -> dict[str, Any]:
        try:
            episode = release.episode(body.task_id, max_turns=body.max_turns)
        except KeyError as err:
            raise HTTPException(404, str(err.args[0])) from None
        return {"episode_id": episodes.add(episode), "observation": episode.observation}

    @app.post("/episodes/{episode_id}/step", response_model=StepReply)
    def step(episode_id: str, body: Step) -> StepReply:
        episode, lock = episodes.get(episode_id)
        with lock:
            result = episode.call(body.tool, body.arguments)
            return StepReply(result=result, done=episode.done)

    @app.get("/episodes/{episode_id}/trajectory", response_model=Trajectory)
    def trajectory(episode_id: str, agent: str = "remote", trial: int = 0) -> Trajectory:
        episode, lock = episodes.get(episode_id)
        with lock:
            return episode.trajectory(agent, trial)

    @app.delete("/episodes/{episode_id}")
    def close(episode_id: str) -> dict[str, bool]:
        episodes.pop(episode_id).close()
        return {"closed": True}

    return app
