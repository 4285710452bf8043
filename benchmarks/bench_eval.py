"""Benchmark the evaluation runner in one run: oracle episodes per second in-process and with a worker pool.

Usage: python benchmarks/bench_eval.py RELEASE_DIR DB [--split S] [--workers 2] [--k 1]
(writes benchmarks/results/eval.json). Everything is measured in the same run on the same machine; the goal
(>= 50 oracle episodes/s) is reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from pipeline.env.release import Release
from pipeline.evaluate.evaluation import metrics_document
from pipeline.evaluate.report import write_report
from pipeline.evaluate.runner import EvalConfig, run_agents, select_tasks, worker_pool

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "eval.json"
GOAL_EPISODES_PER_SECOND = 50


def measure(release, config: EvalConfig, task_ids: list[str]) -> dict:
    """Run the oracle once with `config.workers`; episodes, seconds, episodes/s and the pass rate."""
    started = time.perf_counter()
    runs, _ = run_agents(release, task_ids, config, lambda name, n: None)
    seconds = time.perf_counter() - started
    results = [r for run in runs["oracle"] for r in run.results]
    return {
        "workers": config.workers,
        "episodes": len(results),
        "seconds": seconds,
        "episodes_per_second": len(results) / seconds,
        "passed_share": sum(r.passed for r in results) / len(results),
        "runs": runs,
    }


def pool_startup(config: EvalConfig) -> float:
    """Seconds until every worker has spawned, imported the package and opened its Release (paid once per run)."""
    started = time.perf_counter()
    with worker_pool(config) as pool:
        if pool is None:
            raise ValueError("pool_startup needs config.workers >= 2")
        for future in [pool.submit(os.getpid) for _ in range(config.workers)]:
            future.result()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", type=Path)
    parser.add_argument("db", type=Path)
    parser.add_argument("--split", default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--k", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    release = Release.open(args.release, args.db)
    open_seconds = time.perf_counter() - started
    config = EvalConfig(release_dir=args.release, db=args.db, agents=["oracle"], k=args.k, split=args.split, workers=1)
    task_ids = select_tasks(release, args.split)
    serial = measure(release, config, task_ids)
    pooled = measure(release, config.model_copy(update={"workers": args.workers}), task_ids)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        write_report(metrics_document(config, task_ids, serial.pop("runs")), Path(tmp))
    report_seconds = time.perf_counter() - started
    pooled.pop("runs")
    pooled["startup_seconds"] = pool_startup(config.model_copy(update={"workers": args.workers}))
    result = {
        "release": str(args.release),
        "tasks": len(task_ids),
        "k": args.k,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "release_open_seconds": open_seconds,
        "in_process": serial,
        "pool": pooled,
        "pool_over_in_process_speed": pooled["episodes_per_second"] / serial["episodes_per_second"],
        "metrics_and_report_seconds": report_seconds,
        "goal_episodes_per_second": GOAL_EPISODES_PER_SECOND,
        "best_over_goal": max(serial["episodes_per_second"], pooled["episodes_per_second"]) / GOAL_EPISODES_PER_SECOND,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
