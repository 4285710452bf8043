"""Agent SQL in process vs in the executor's child process (pipeline.env.executor), on one release.

Usage: python benchmarks/bench_executor.py RELEASE_DIR DB [--tasks N]   (writes benchmarks/results/executor.json)
For each of the first N tasks, in both modes, interleaved per task: open an episode, run the task's reference
SQL through the sql tool 3 times, close; and the time a crash costs (child killed, restarted, overlays re-applied).
Ratios are measured in one run on one machine; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from pipeline.env.executor import CRASHED
from pipeline.env.release import Release

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "executor.json"
CRASH = "SELECT json_contains(j, j) FROM (SELECT repeat('[', 100000) || repeat(']', 100000) AS j)"


def episode_seconds(release: Release, task_id: str, sql: str) -> tuple[float, float]:
    """(seconds to open and close the episode, seconds of 3 runs of `sql` through its sql tool)."""
    started = time.perf_counter()
    with release.episode(task_id) as episode:
        opened = time.perf_counter()
        for _ in range(3):
            episode.call("sql", {"query": sql})
        queried = time.perf_counter()
    return time.perf_counter() - queried + opened - started, queried - opened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", type=Path)
    parser.add_argument("db", type=Path)
    parser.add_argument("--tasks", type=int, default=60)
    args = parser.parse_args()
    with Release.open(args.release, args.db) as local, Release.open(args.release, args.db, isolate=True) as isolated:
        tasks = [t.task_id for t in local.tasks()][: args.tasks]
        times: dict[str, tuple[list[float], list[float]]] = {"in_process": ([], []), "executor": ([], [])}
        for task_id in tasks:
            sql = local.label(task_id).reference_sql
            for mode, release in (("in_process", local), ("executor", isolated)):
                opened, queried = episode_seconds(release, task_id, sql)
                times[mode][0].append(opened)
                times[mode][1].append(queried)
        started = time.perf_counter()
        with isolated.episode(tasks[0]) as episode:
            crashed = isolated.executor.run(isolated.executor.open_episodes[-1], CRASH, 5.0)
            recovered = episode.call("sql", {"query": "SELECT count(*) FROM patients"}).ok
        crash_seconds = time.perf_counter() - started
    summary: dict[str, Any] = {
        mode: {
            "episode_open_close_ms_median": round(1000 * statistics.median(o), 1),
            "query_seconds_total": round(sum(q), 3),
        }
        for mode, (o, q) in times.items()
    }
    summary["query_time_ratio_executor_over_in_process"] = round(
        summary["executor"]["query_seconds_total"] / summary["in_process"]["query_seconds_total"], 2
    )
    summary["crash"] = {
        "contained": crashed.error == CRASHED and recovered,
        "seconds_to_recover": round(crash_seconds, 2),
    }
    summary["tasks"] = len(tasks)
    print(json.dumps(summary, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
