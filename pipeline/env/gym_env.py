"""A gymnasium Env over a release (`EHRRobustGym-v0`): one episode per reset, one tool call per step."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from pipeline.env.release import Release

if TYPE_CHECKING:
    from pipeline.env.episode import Episode

ENV_ID = "EHRRobustGym-v0"


class _JsonSpace(gym.spaces.Space):
    """Observations and actions are JSON-like dicts (the episode's text API). `sample()` draws one of the
    `examples` (a function giving them, called on the first draw) with the space's seeded generator."""

    def __init__(self, examples: Callable[[], tuple[dict, ...]]) -> None:
        super().__init__(shape=None, dtype=None)
        self._examples = examples
        self._drawn: tuple[dict, ...] | None = None

    def contains(self, x: Any) -> bool:
        return isinstance(x, dict)

    def sample(self, mask: Any = None, probability: Any = None) -> dict:
        if self._drawn is None:
            self._drawn = self._examples()
        drawn = self._drawn
        return copy.deepcopy(drawn[int(self.np_random.integers(len(drawn)))])


# Actions a random policy (and gymnasium's env checker) can take: a harmless query, or an abstention.
SAMPLE_ACTIONS = (
    {"tool": "sql", "arguments": {"query": "SELECT count(*) AS n FROM patients"}},
    {"tool": "answer", "arguments": {"value": None}},
)


class EHRRobustGymEnv(gym.Env):
    """reset(seed=, options={"task_id"}) -> (obs, info); step({"tool", "arguments"}) -> (obs, reward,
    terminated, truncated, info). The reward (1.0 or 0.0) comes from the verifier when the agent answers."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        release: Release | None = None,
        release_dir: str | Path | None = None,
        source_db: str | Path | None = None,
        split: str | None = None,
        max_turns: int = 30,
    ):
        if release is None:
            if release_dir is None or source_db is None:
                raise ValueError(f"{ENV_ID}: give release=Release.open(...) or release_dir= and source_db=")
            release = Release.open(Path(release_dir), Path(source_db))
        self.release, self.split, self.max_turns = release, split, max_turns
        self.observation_space = _JsonSpace(lambda: (self._opening_observation(),))
        self.action_space = _JsonSpace(lambda: SAMPLE_ACTIONS)
        self.episode: Episode | None = None

    def _opening_observation(self) -> dict:
        """What reset shows for the first task of the split: a real observation for the space to sample."""
        episode = self.release.episode(self.release.tasks(self.split)[0].task_id, max_turns=self.max_turns)
        try:
            return episode.observation
        finally:
            episode.close()

    def _choose(self, options: dict | None) -> str:
        if options and options.get("task_id"):
            return str(options["task_id"])
        tasks = self.release.tasks(self.split)
        return tasks[int(self.np_random.integers(len(tasks)))].task_id

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.episode is not None:
            self.episode.close()
        self.episode = episode = self.release.episode(self._choose(options), max_turns=self.max_turns)
        return episode.observation, {"task_id": episode.task.task_id}

    def step(self, action: dict):
        if self.episode is None:
            raise RuntimeError(f"{ENV_ID}: call reset() before step()")
        action = action if isinstance(action, dict) else {}
        result = self.episode.call(str(action.get("tool", "")), action.get("arguments", {}))
        terminated = self.episode.done and not self.episode.truncated
        reward = self._reward() if terminated else 0.0
        obs = {**self.episode.observation, "result": result.model_dump()}
        return obs, reward, terminated, self.episode.truncated, {"task_id": self.episode.task.task_id}

    def _reward(self) -> float:
        from pipeline.env.verifier import verify  # written by the evaluation engineer; loaded when first needed

        if self.episode is None:
            raise RuntimeError(f"{ENV_ID}: call reset() before step()")
        trajectory = self.episode.trajectory(agent="gym")
        label = self.release.label(self.episode.task.task_id)
        with self.release.source_cursor() as source:
            return float(verify(label, trajectory, template=self.release.template(label), source=source).passed)

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None


def register_env() -> None:
    """Register `EHRRobustGym-v0` with gymnasium (idempotent)."""
    if ENV_ID not in gym.envs.registry:
        gym.register(id=ENV_ID, entry_point="pipeline.env.gym_env:EHRRobustGymEnv", disable_env_checker=True)


register_env()
