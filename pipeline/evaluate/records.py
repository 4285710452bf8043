"""The scored outcome of one episode: the verdict joined with the task's hidden label fields the metrics group by."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

GROUP_FIELDS = ("intent", "scope", "level", "subtype")  # the breakdowns of metrics.json and the report


class EpisodeResult(BaseModel):
    """One (agent, task, trial): what the metrics need, nothing an agent could have seen during the episode."""

    model_config = ConfigDict(extra="forbid")
    agent: str
    task_id: str
    trial: int
    split: str
    condition: Literal["clean", "noise"]
    intent: str
    scope: str
    level: str  # a clean task carries its pair's level and sub-type
    subtype: str
    contract: Literal["answer", "abstain", "repair"]
    answerable: bool  # the expected answer is not NULL
    answered: bool  # the agent called `answer` (False: it ran out of turns or stopped)
    abstained: bool  # it answered NULL
    passed: bool
    answer_match: bool | None = None
    abstention_valid: bool | None = None
    reasons: list[str] = []
    turns: int = 0
    truncated: bool = False  # no wall time here: verdicts are byte-identical across reruns (timing.json has it)
