"""Benchmark the environment in one run: episode reset median, the SQL tool vs raw DuckDB on the same queries,
and oracle episodes per second.

Usage: python benchmarks/bench_env.py RELEASE_DIR DB [--repeats R] [--episodes N]   (writes benchmarks/results/env.json)
Goals from issue 7: reset <= 20 ms, SQL tool <= 1.3x raw, >= 50 oracle episodes/s. Ratios are measured in the same
run on the same machine; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from pipeline.env.gateway import plain
from pipeline.env.release import Release
from pipeline.env.sqlcheck import admit_cached

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "env.json"


def reset_times(release: Release, task_ids: list[str]) -> dict[str, float]:
    """Milliseconds from `release.episode(task_id)` to its observation, per condition."""
    by_condition: dict[str, list[float]] = {"clean": [], "noise": []}
    for task_id in task_ids:
        started = time.perf_counter()
        episode = release.episode(task_id)
        _ = episode.observation
        by_condition[release.label(task_id).condition].append((time.perf_counter() - started) * 1000)
        episode.close()
    every = by_condition["clean"] + by_condition["noise"]
    return {
        "reset_ms_median": statistics.median(every),
        "reset_ms_p90": sorted(every)[int(0.9 * (len(every) - 1))],
        "reset_ms_median_clean": statistics.median(by_condition["clean"] or [0.0]),
        "reset_ms_median_noise": statistics.median(by_condition["noise"] or [0.0]),
        "resets": len(every),
    }


def _raw(cursor, sql: str, cap: int) -> list:
    """What a plain DuckDB client does for the same answer: execute, fetch up to the cap, convert to JSON values."""
    return [[plain(v) for v in row] for row in cursor.execute(sql).fetchmany(cap + 1)[:cap]]


def _best(fn, repeats: int, before=None) -> float:
    times = []
    for _ in range(repeats):
        if before:
            before()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def sql_tool_vs_raw(release: Release, task_ids: list[str], repeats: int) -> dict[str, float]:
    """Each task's reference SQL through the sql tool and raw on the same episode cursor (same overlay), best of
    `repeats`: `cold` clears the gateway's memo of admitted texts before every call (every query parsed and
    checked anew), `warm` lets repeated texts reuse it (as repeated trials do)."""
    totals, ratios = {"cold": 0.0, "warm": 0.0, "raw": 0.0}, []
    for task_id in task_ids:
        sql = release.label(task_id).reference_sql
        with release.episode(task_id, max_turns=10 * repeats + 10) as episode:
            cold = _best(lambda: episode.call("sql", {"query": sql}), repeats, admit_cached.cache_clear)
            warm = _best(lambda: episode.call("sql", {"query": sql}), repeats)
            raw = _best(lambda: _raw(episode.gateway.cursor, sql, release.limits.row_cap), repeats)
        totals = {"cold": totals["cold"] + cold, "warm": totals["warm"] + warm, "raw": totals["raw"] + raw}
        ratios.append(cold / raw)
    return {
        "sql_tool_cold_s": totals["cold"],
        "sql_tool_warm_s": totals["warm"],
        "raw_duckdb_s": totals["raw"],
        "sql_tool_vs_raw": totals["cold"] / totals["raw"],
        "sql_tool_vs_raw_warm": totals["warm"] / totals["raw"],
        "sql_tool_vs_raw_median_per_query": statistics.median(ratios),
        "queries": len(task_ids),
    }


def _oracle_pass(release: Release, agent, contexts: dict) -> tuple[float, int]:
    from pipeline.env.verifier import verify

    passed, started = 0, time.perf_counter()
    for task_id, context in contexts.items():
        with release.episode(task_id) as episode:
            agent.run(episode, context)
            passed += verify(release.label(task_id), episode.trajectory(agent.name)).passed
    return time.perf_counter() - started, passed


def oracle_episodes(release: Release, task_ids: list[str]) -> dict[str, float]:
    """Full oracle episodes (reset, tool calls, answer, verification) per second: a first pass with the memo of
    admitted texts cleared (cold), then a second pass over the same tasks (warm, as trial 2..k of an evaluation)."""
    from pipeline.agents import get_agent
    from pipeline.agents.base import context_for

    agent = get_agent("oracle")
    contexts = {task_id: context_for(release, task_id) for task_id in task_ids}
    admit_cached.cache_clear()  # the sql tool section admitted these texts already
    cold_s, passed = _oracle_pass(release, agent, contexts)
    warm_s, _ = _oracle_pass(release, agent, contexts)
    return {
        "oracle_episodes_per_s": len(task_ids) / cold_s,
        "oracle_episodes_per_s_warm": len(task_ids) / warm_s,
        "oracle_episodes": len(task_ids),
        "oracle_pass_rate": passed / len(task_ids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", type=Path)
    parser.add_argument("db", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=0, help="tasks to use (0: every task of the release)")
    args = parser.parse_args()
    with Release.open(args.release, args.db) as release:
        task_ids = [t.task_id for t in release.tasks()][: args.episodes or None]
        release.episode(task_ids[0]).close()  # warm caches (function list, schema) outside the measurement
        result: dict[str, Any] = {
            "release": release.version,
            "tasks": len(task_ids),
            **reset_times(release, task_ids),
            **sql_tool_vs_raw(release, task_ids, args.repeats),
            **oracle_episodes(release, task_ids),
        }
    result["goals"] = {
        "reset_ms_median<=20": result["reset_ms_median"] <= 20,
        "sql_tool_vs_raw<=1.3 (cold)": result["sql_tool_vs_raw"] <= 1.3,
        "sql_tool_vs_raw<=1.3 (warm)": result["sql_tool_vs_raw_warm"] <= 1.3,
        "oracle_episodes_per_s>=50 (cold)": result["oracle_episodes_per_s"] >= 50,
        "oracle_episodes_per_s>=50 (warm)": result["oracle_episodes_per_s_warm"] >= 50,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
