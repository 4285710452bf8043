"""One evaluation end to end: open the release, run the agents, score, and publish the output folder atomically.

The folder holds `trajectories/<agent>.jsonl` and `verdicts/<agent>.jsonl` (task order, then trial), `metrics.json`
and `report.html` (the same bytes for the same release, agents, k, split and seed) and `timing.json` (wall times).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline import jsonl
from pipeline.atomic import atomic_output
from pipeline.evaluate.metrics import agent_metrics
from pipeline.evaluate.records import EpisodeResult
from pipeline.evaluate.report import write_report
from pipeline.evaluate.runner import EvalConfig, OnTask, TaskRun, run_agents, select_tasks


def release_info(release_dir: Path) -> dict[str, Any]:
    """Version and source fingerprint from the release's manifest.json (already checked by Release.open)."""
    manifest = json.loads((release_dir / "manifest.json").read_text())
    source = manifest.get("source", {})
    return {"release_version": manifest.get("version"), "source_fingerprint": source.get("fingerprint")}


def run_document(config: EvalConfig, task_ids: list[str]) -> dict[str, Any]:
    """The `run` section of metrics.json: everything that decides the numbers (not workers, not wall times)."""
    return {
        "release_dir": str(config.release_dir),
        **release_info(config.release_dir),
        "split": config.split or "all",
        "k": config.k,
        "seed": config.seed,
        "max_turns": config.max_turns,
        "agents": config.agents,
        "agent_options": config.agent_options,
        "tasks": len(task_ids),
    }


def results_of(runs: list[TaskRun]) -> list[EpisodeResult]:
    return [r for run in runs for r in run.results]


def metrics_document(config: EvalConfig, task_ids: list[str], runs: dict[str, list[TaskRun]]) -> dict[str, Any]:
    return {
        "run": run_document(config, task_ids),
        "agents": {name: agent_metrics(results_of(agent_runs), config.k) for name, agent_runs in runs.items()},
    }


def write_outputs(folder: Path, metrics: dict, runs: dict[str, list[TaskRun]], timing: dict) -> None:
    """Every file of an evaluation folder (into `folder`, which the caller publishes)."""
    for name, agent_runs in runs.items():
        jsonl.write(folder / "trajectories" / f"{name}.jsonl", (t for run in agent_runs for t in run.trajectories))
        jsonl.write(folder / "verdicts" / f"{name}.jsonl", (r for run in agent_runs for r in run.results))
    write_report(metrics, folder)
    (folder / "timing.json").write_text(json.dumps(timing, indent=1, sort_keys=True) + "\n")


@contextmanager
def publish_folder(out: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder that replaces `out` whole on success.

    An empty `out` is replaced; a non-empty one only with `overwrite`, and it is moved aside first (and put back
    if the new folder fails), because a directory cannot be renamed onto a non-empty one.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"--out {out} exists and is not empty; pass --overwrite to replace it")
    aside = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.is_dir():
        os.rename(out, aside)
    try:
        with atomic_output(out) as tmp:
            tmp.mkdir()
            yield tmp
    except BaseException:
        if aside.exists():
            os.rename(aside, out)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def timing_document(runs: dict[str, list[TaskRun]], seconds: dict[str, float], workers: int) -> dict[str, Any]:
    """Wall time and episodes per second per agent (kept out of metrics.json: it differs run to run)."""
    out = {}
    for name, agent_runs in runs.items():
        episodes = sum(len(run.results) for run in agent_runs)
        out[name] = {
            "episodes": episodes,
            "seconds": seconds[name],
            "episodes_per_second": episodes / max(seconds[name], 1e-9),
        }
    return {"workers": workers, "agents": out}


def evaluate(release, config: EvalConfig, out: Path, overwrite: bool = False, on_task: OnTask | None = None) -> dict:
    """Run, score and publish; returns the metrics document. `release` is the opened Release of config.release_dir."""
    task_ids = select_tasks(release, config.split)
    if Path(out).is_dir() and any(Path(out).iterdir()) and not overwrite:  # refuse before the long part
        raise FileExistsError(f"--out {out} exists and is not empty; pass --overwrite to replace it")
    runs, seconds = run_agents(release, task_ids, config, on_task or (lambda name, n: None))
    metrics = metrics_document(config, task_ids, runs)
    with publish_folder(out, overwrite) as folder:
        write_outputs(folder, metrics, runs, timing_document(runs, seconds, config.workers))
    return metrics
