"""The verifier as an RL reward: 1.0 or 0.0 with the verifier's reasons, computed from the recorded trajectory alone.

The reward reads what the episode already recorded (the answer and the gateway statements it ran); it never
re-executes a tool call, so scoring cannot change the episode, the database or the sandbox.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from pipeline.env.records import Trajectory
from pipeline.release.records import LabelRecord
from pipeline.templates.spec import Template


class Reward(BaseModel):
    """A scalar reward for a finished episode and why."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    value: float  # 1.0 passed, 0.0 otherwise
    passed: bool
    answer_match: bool | None = None
    abstention_valid: bool | None = None
    reasons: list[str] = []


def reward(label: LabelRecord, trajectory: Trajectory, template: Template | None = None, source=None) -> Reward:
    """verify(label, trajectory, template) as a reward; the label must be the trajectory's task's. `template`
    defaults to the registry's (a release's own is `release.template(label)`: see release_reward); `source`, the
    clean source database, decides abstention validity by evidence coverage (None: the version-1 pin rule)."""
    from pipeline.env.verifier import verify

    if label.task_id != trajectory.task_id:
        raise ValueError(f"label of task {label.task_id} given for a trajectory of task {trajectory.task_id}")
    verdict = verify(label, trajectory, template=template, source=source)
    return Reward(
        task_id=label.task_id,
        value=1.0 if verdict.passed else 0.0,
        passed=verdict.passed,
        answer_match=verdict.answer_match,
        abstention_valid=verdict.abstention_valid,
        reasons=list(verdict.reasons),
    )


def release_reward(release, trajectory: Trajectory) -> Reward:
    """The reward of a trajectory of one of the release's tasks (server side: the label never reaches the agent)."""
    label = release.label(trajectory.task_id)
    with release.source_cursor() as source:  # the clean source: abstention validity from evidence coverage
        return reward(label, trajectory, release.template(label), source)
