"""Typed records of an episode: a tool's result, the gateway statements it ran, and the trajectory an agent leaves."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipeline.templates.answers import AnswerFormat, AnswerValue


class ToolResult(BaseModel):
    """What a tool call returns to the agent; failures are results with ok=False and content 'Error: ...'."""

    model_config = ConfigDict(extra="forbid")
    ok: bool
    content: str  # the text the agent reads (a table, the schema, printed output, or "Error: ...")
    columns: list[str] = []
    rows: list[list[Any]] = []  # JSON-plain values, at most the row cap
    truncated: bool = False
    error: str | None = None


class QueryRecord(BaseModel):
    """One statement the SQL gateway admitted or refused, sent directly (`sql`) or from the Python tool."""

    model_config = ConfigDict(extra="forbid")
    sql: str
    via: Literal["sql", "python"]
    ok: bool
    row_count: int = 0
    error: str | None = None


class ToolCall(BaseModel):
    """One step of an episode."""

    model_config = ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any]
    result: ToolResult
    queries: list[QueryRecord] = []
    seconds: float = 0.0  # wall time; left out when trajectories are compared for determinism


class Trajectory(BaseModel):
    """Everything an agent did in one episode, and its final answer (None: it never answered)."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    agent: str
    trial: int = 0
    question: str
    answer_format: AnswerFormat | None = None  # as the task showed it (None: a release without formats)
    calls: list[ToolCall] = []
    answer: AnswerValue | None = None
    truncated: bool = False
