"""Timing channel: how often repeated full scans from inside an episode single out the table its patch touches,
with untouched tables read directly (`noshadow`, the old layout) and through shadow views (`shadow`).

Usage: python benchmarks/bench_timing.py DB [--episodes 32] [--scans 3] [--layouts noshadow,shadow]
Each episode's patch hides 1-3 rows of one of 10 tables (pipeline.env.timing.probe_patch); the clean twin has
none. Prints, per layout and condition, hits of the attacker against the binomial bound at alpha 0.001, the
median episode open and the scan cost; writes benchmarks/results/timing.json. Nothing here asserts a timing:
tests/test_timing_channel.py checks the deterministic half (clean and noisy episodes run the same plan).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import pipeline.env.episode as episode_module
from pipeline.env.episode import Episode
from pipeline.env.gateway import Gateway, Limits, open_locked
from pipeline.env.timing import PROBE_TABLES, Probe, binomial_upper, pick, probe_episode, probe_patches, probe_task
from pipeline.noise.patch import Patch
from pipeline.source.schema import TABLE_NAMES, load_schema

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "timing.json"
TABLES = PROBE_TABLES


def probe(db: Path, patches: list[tuple[str, Patch]], scans: int) -> tuple[list[Probe], list[float]]:
    """One probe per episode (clean twin, then noisy) and the seconds each episode took to open."""
    con = open_locked(db, Limits())
    try:
        functions, schema = Gateway.functions_of(con), load_schema()
        tables = {t: schema[t].column_names[0] for t in TABLES}
        probes, opens = [], []
        for n, (table, patch) in enumerate(patches):
            for noisy in (False, True):
                started = time.perf_counter()
                with Episode(probe_task(n), con.cursor(), patch if noisy else None, functions, Limits()) as ep:
                    opens.append(time.perf_counter() - started)
                    run = lambda sql, ep=ep: ep.call("sql", {"query": sql})  # noqa: E731 - the agent's own tool
                    probes.append(Probe(ep.task.task_id, table, noisy, probe_episode(run, tables, scans)))
        return probes, opens
    finally:
        con.close()


def summary(probes: list[Probe], opens: list[float]) -> dict:
    baseline = {t: statistics.median(p.seconds[t] for p in probes) for t in TABLES}
    out: dict = {
        "episode_open_ms_median": round(statistics.median(opens) * 1000, 1),
        "full_scan_ms_median": {t: round(baseline[t] * 1000, 2) for t in TABLES},
    }
    for noisy in (True, False):
        chosen = [p for p in probes if p.noisy == noisy]
        hits = sum(pick(p.seconds, baseline) == p.patched for p in chosen)
        out["noisy" if noisy else "clean"] = {
            "hits": hits,
            "episodes": len(chosen),
            "chance": 1 / len(TABLES),
            "bound_alpha_0.001": binomial_upper(len(chosen), 1 / len(TABLES)),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--scans", type=int, default=3)
    parser.add_argument("--layouts", default="noshadow,shadow")
    args = parser.parse_args()
    patches = probe_patches(args.db, args.episodes)
    results = {}
    for layout in args.layouts.split(","):
        episode_module.SHADOW_TABLES = TABLE_NAMES if layout == "shadow" else ()
        results[layout] = summary(*probe(args.db, patches, args.scans))
        row = results[layout]
        print(
            f"[{layout}] noisy {row['noisy']['hits']}/{row['noisy']['episodes']}, clean "
            f"{row['clean']['hits']}/{row['clean']['episodes']} (bound {row['noisy']['bound_alpha_0.001']}); "
            f"episode open {row['episode_open_ms_median']} ms"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"db": args.db.name, "episodes": args.episodes, "scans": args.scans, "layouts": results}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    main()
