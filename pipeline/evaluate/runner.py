"""Run agents x tasks x k trials on a release: episodes, trajectories, verdicts; a process pool where it is safe."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipeline.env.records import Trajectory
from pipeline.evaluate.records import EpisodeResult
from pipeline.workers import spawn_pool

OnTask = Callable[[str, int], None]  # (agent name, episodes finished) after each task


class EvalConfig(BaseModel):
    """What decides an evaluation's content (recorded in metrics.json); `workers` changes only the speed."""

    model_config = ConfigDict(extra="forbid")
    release_dir: Path
    db: Path
    agents: list[str] = Field(min_length=1)
    agent_options: dict[str, dict[str, Any]] = {}  # per agent name: keyword options of get_agent
    k: int = Field(default=1, ge=1)
    split: str | None = None  # None: every task of the release
    seed: int = 0  # trial t runs with seed + t
    max_turns: int = Field(default=30, ge=1)
    workers: int = Field(default=2, ge=1)
    isolate: bool = Field(default=True, exclude=True)  # agents' SQL in a child process (pipeline.env.executor)


class TaskRun(BaseModel):
    """The k trials of one agent on one task, in trial order."""

    model_config = ConfigDict(extra="forbid")
    trajectories: list[Trajectory]
    results: list[EpisodeResult]


def episode_result(label, trajectory: Trajectory, verdict, error: str | None = None) -> EpisodeResult:
    """Join the verdict with the label fields the metrics group by."""
    answer = trajectory.answer
    reasons = list(verdict.reasons) + ([error] if error else [])
    return EpisodeResult(
        agent=trajectory.agent,
        task_id=label.task_id,
        trial=trajectory.trial,
        split=label.split,
        condition=label.condition,
        intent=label.intent,
        scope=label.scope,
        level=label.level,
        subtype=label.subtype,
        contract=label.contract,
        answerable=label.expected.value is not None,
        answered=answer is not None,
        abstained=answer is not None and answer.value is None,
        passed=verdict.passed and error is None,
        answer_match=verdict.answer_match,
        abstention_valid=verdict.abstention_valid,
        reasons=reasons,
        turns=len(trajectory.calls),
        truncated=trajectory.truncated,
    )


def run_trial(release, agent, task_id: str, trial: int, seed: int, max_turns: int) -> tuple[Trajectory, EpisodeResult]:
    """One episode: run the agent, take its trajectory, verify it against the hidden label."""
    from pipeline.agents.base import context_for
    from pipeline.env.verifier import verify

    episode, error = release.episode(task_id, max_turns=max_turns), None
    try:
        try:
            agent.run(episode, context_for(release, task_id), seed=seed)
        except Exception as exc:  # an agent's crash fails its episode, not the evaluation
            error = f"agent {agent.name} raised {type(exc).__name__}: {exc}"
        trajectory = episode.trajectory(agent.name, trial)
    finally:
        episode.close()
    label = release.label(task_id)
    template = release.template(label)  # the release's own template: scoring survives template bumps
    with release.source_cursor() as source:  # the clean source: abstention validity from evidence coverage
        verdict = verify(label, trajectory, template=template, source=source)
    return trajectory, episode_result(label, trajectory, verdict, error)


def run_task(release, agent, task_id: str, config: EvalConfig) -> TaskRun:
    """The k trials of `agent` on one task (trial t with seed config.seed + t)."""
    pairs = [run_trial(release, agent, task_id, t, config.seed + t, config.max_turns) for t in range(config.k)]
    return TaskRun(trajectories=[p[0] for p in pairs], results=[p[1] for p in pairs])


# Worker processes: each opens its own Release once and keeps its agents.
_WORKER: dict[str, Any] = {}


def _init_worker(release_dir: Path, db: Path, isolate: bool) -> None:
    from pipeline.env.release import Release

    _WORKER.update(release=Release.open(release_dir, db, isolate=isolate), agents={})


def _agent(name: str, options: dict[str, Any]):
    from pipeline.agents import get_agent

    agents = _WORKER.setdefault("agents", {})
    if name not in agents:
        agents[name] = get_agent(name, **options)
    return agents[name]


def _worker_tasks(name: str, task_ids: list[str], config_json: str) -> list[str]:
    config = EvalConfig.model_validate_json(config_json)
    agent = _agent(name, config.agent_options.get(name, {}))
    return [run_task(_WORKER["release"], agent, task_id, config).model_dump_json() for task_id in task_ids]


def chunks(items: list[str], workers: int) -> list[list[str]]:
    """About eight chunks per worker: few enough to keep the pool's overhead small, enough to balance the load."""
    size = max(1, -(-len(items) // (8 * workers)))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _serial(release, name: str, task_ids: list[str], config: EvalConfig, on_task: OnTask) -> Iterator[TaskRun]:
    from pipeline.agents import get_agent

    agent = get_agent(name, **config.agent_options.get(name, {}))
    for task_id in task_ids:
        run = run_task(release, agent, task_id, config)
        on_task(name, config.k)
        yield run


def _parallel(pool, name: str, task_ids: list[str], config: EvalConfig, on_task: OnTask) -> list[TaskRun]:
    """Submit the tasks in chunks, then merge the results back into task order."""
    parts = chunks(task_ids, config.workers)
    futures = {pool.submit(_worker_tasks, name, part, config.model_dump_json()): i for i, part in enumerate(parts)}
    done: list[list[TaskRun]] = [[] for _ in parts]
    for future in as_completed(futures):
        done[futures[future]] = [TaskRun.model_validate_json(text) for text in future.result()]
        on_task(name, config.k * len(done[futures[future]]))
    return [run for part in done for run in part]


def parallel_safe(name: str, options: dict[str, Any]) -> bool:
    """An agent may opt out of the pool (e.g. one holding a rate-limited connection) with `parallel_safe = False`."""
    from pipeline.agents import get_agent

    return bool(getattr(get_agent(name, **options), "parallel_safe", True))


@contextmanager
def worker_pool(config: EvalConfig) -> Iterator[ProcessPoolExecutor | None]:
    """A pool of config.workers spawn-started processes (`spawn_pool`: no forked DuckDB connections, polars' threads
    shared out, none outliving the evaluation), or None for one worker."""
    if config.workers < 2:
        yield None
        return
    with spawn_pool(config.workers, _init_worker, (config.release_dir, config.db, config.isolate)) as pool:
        yield pool


def run_agents(
    release, task_ids: list[str], config: EvalConfig, on_task: OnTask
) -> tuple[dict[str, list[TaskRun]], dict[str, float]]:
    """Every agent on every task, in the configured agent order and the release's task order; wall seconds per agent."""
    runs: dict[str, list[TaskRun]] = {}
    seconds: dict[str, float] = {}
    with worker_pool(config) as pool:
        for name in config.agents:
            started, options = time.perf_counter(), config.agent_options.get(name, {})
            if pool is not None and parallel_safe(name, options):
                runs[name] = _parallel(pool, name, task_ids, config, on_task)
            else:
                runs[name] = list(_serial(release, name, task_ids, config, on_task))
            seconds[name] = time.perf_counter() - started
    return runs, seconds


def select_tasks(release, split: str | None) -> list[str]:
    """The task ids of the split (all tasks when None), in the release's order; an unknown split raises ValueError."""
    task_ids = [t.task_id for t in release.tasks(split)]
    if not task_ids:
        raise ValueError(f"release {release.version} has no task{'' if split is None else f' in split {split!r}'}")
    return task_ids
