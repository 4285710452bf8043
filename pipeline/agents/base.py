"""The agent interface, what a scripted agent may know (AgentContext), and helpers that act through an episode's tools.

Information boundary. `context_for(release, task_id)` reads the agent-visible question back into its template
and slots (`pipeline.agents.reading`: the release's public phrasings, matched exactly): the task id and question,
the template (id, Answer spec, gold SQL template, evidence SQL template: template-level knowledge, the same for
every task of the template) and the slot values the question states. Nothing of it comes from the label. The
task's hidden label is attached as `label` only; `Agent.run` strips it before a non-privileged agent sees the
context, and refuses a non-privileged agent a context that was not read from the episode's question. Only an
agent whose class sets `privileged = True` (the `oracle`, an upper bound) reads the label.
Every agent acts only through the episode's tools (sql / python / schema / answer), so its trajectory is real.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import polars as pl
from pydantic import BaseModel, ConfigDict, PrivateAttr

from pipeline.agents.reading import Reader, reader_for, reading_key
from pipeline.env.records import ToolResult
from pipeline.release.records import LabelRecord
from pipeline.templates.answers import AnswerShapeError, AnswerValue, canonical_answer, first_reading
from pipeline.templates.instantiate import typed_slots
from pipeline.templates.render import render_sql
from pipeline.templates.spec import Template


class AgentContext(BaseModel):
    """What a scripted agent knows about a task; `label` is None for every agent but a privileged one."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    task_id: str
    question: str
    template: Template
    slots: dict[str, Any]
    label: LabelRecord | None = None
    _read: str | None = PrivateAttr(default=None)  # the reading template and slots came from (read_context only)

    @property
    def read_from_question(self) -> bool:
        """True when the template and slots are exactly what reading `question` gave (not built or edited by hand)."""
        return self._read is not None and self._read == reading_key(self.question, self.template, self.slots)

    def public(self) -> AgentContext:
        """The context without the hidden label: what the question alone tells."""
        return self.model_copy(update={"label": None})

    def render(self, sql_template: str, slots: dict[str, Any] | None = None) -> str:
        """A SQL template of this task's template rendered with the question's (or the given) slots."""
        return render_sql(sql_template, typed_slots(self.template, self.slots if slots is None else slots))


def read_context(task_id: str, question: str, reader: Reader) -> AgentContext:
    """The public context of a question: its template and slots read from the question text alone."""
    reading = reader.read(question)
    context = AgentContext(task_id=task_id, question=question, template=reading.template, slots=reading.slots)
    context._read = reading_key(question, reading.template, reading.slots)
    return context


def context_for(release, task_id: str) -> AgentContext:
    """The context of one task of a release: read from its agent-visible record with the release's own templates
    (`reading.reader_for`), plus the hidden label as `label` only (`Agent.run` strips it for most agents)."""
    try:
        task = release.task(task_id)
    except KeyError:
        raise ValueError(f"task {task_id!r} has no agent-visible record in release {release.version}") from None
    context = read_context(task_id, task.question, reader_for(release))
    return context.model_copy(update={"label": release.label(task_id)})


class Agent:
    """One agent: `run(episode, context, seed)` calls tools until the episode is done or its turns run out.
    Subclasses implement `act`; `run` checks the context belongs to the episode and enforces the boundary."""

    name: ClassVar[str]
    privileged: ClassVar[bool] = False  # True only for an upper bound that may read the hidden label

    def __init__(self, **options: Any):
        if options:
            raise TypeError(f"agent {self.name!r} takes no options, got {sorted(options)}")

    def run(self, episode, context: AgentContext, seed: int = 0) -> None:
        if context.task_id != episode.observation["task_id"]:
            raise ValueError(
                f"context of task {context.task_id!r} given for episode {episode.observation['task_id']!r}"
            )
        if not self.privileged and not (
            context.read_from_question and context.question == episode.observation["question"]
        ):
            raise ValueError(
                f"agent {self.name!r} (not privileged) was given a context for task "
                f"{context.task_id!r} that was not read from the episode's question; build it with "
                f"context_for or read_context"
            )
        self.act(episode, context if self.privileged else context.public(), seed)

    def act(self, episode, context: AgentContext, seed: int) -> None:
        raise NotImplementedError

    # --- tools ----------------------------------------------------------------------------------------------

    @staticmethod
    def sql(episode, query: str) -> pl.DataFrame | None:
        """The rows of a query through the episode's `sql` tool (None: the gateway refused or failed it)."""
        if episode.done:
            return None
        return result_frame(episode.call("sql", {"query": query}))

    @staticmethod
    def answer(episode, answer: AnswerValue) -> ToolResult:
        """Answer as the task's visible answer format asks: the value, its unit, and only the record fields the
        format lists (every agent, the oracle too, answers through this one path)."""
        fmt = episode.observation.get("answer_format")
        records = (
            dict(answer.records) if fmt is None else {k: v for k, v in answer.records.items() if k in fmt["records"]}
        )
        arguments = {"value": answer.value, "unit": answer.unit, "records": records}
        return episode.call("answer", arguments)

    @staticmethod
    def canonical(frame: pl.DataFrame | None, context: AgentContext, careless: bool = False) -> AnswerValue:
        """A result frame as the template's typed answer; no frame, no row, an empty list or a wrong shape is NULL.
        `careless`: several rows for one value give the first (`first_reading`), as a careless reader takes it."""
        if frame is None:
            return AnswerValue(value=None)
        try:
            read = first_reading if careless else canonical_answer
            answer = read(frame, context.template.spec.answer)
        except AnswerShapeError:
            return AnswerValue(value=None)
        return AnswerValue(value=None) if is_empty(answer) or is_nan(answer.value) else answer


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def is_empty(answer: AnswerValue) -> bool:
    return answer.value is None or answer.value == []


def result_frame(result: ToolResult) -> pl.DataFrame | None:
    """A successful tool result's rows as a polars frame (columns typed by their values)."""
    if not result.ok:
        return None
    data = {c: [row[i] for row in result.rows] for i, c in enumerate(result.columns)}
    return pl.DataFrame(data, strict=False) if result.columns else pl.DataFrame()
