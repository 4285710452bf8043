"""Benchmark the noise engine in one run: overlay vs copying the touched tables, a query on an overlay vs on
the source, and verified pairs per minute.

Usage: python benchmarks/bench_noise.py DB [--per-template K] [--seconds S]   (writes benchmarks/results/noise.json)
Ratios are measured in the same run on the same machine; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import duckdb

from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import overlay, source_catalog
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "noise.json"


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def verify_for(con, tasks, templates, seconds: float) -> tuple[list, int, float]:
    """Verify pairs (every applicable sub-type per task) until the time budget is spent."""
    tables, pairs, attempts, started = Tables(con), [], 0, time.perf_counter()
    for task in tasks:
        for subtype in subtypes().values():
            if not subtype.applies(templates[task.template_id]):
                continue
            attempts += 1
            try:
                pairs.append(verify_pair(con, tables, task, templates[task.template_id], subtype, seed=0))
            except Rejected:
                pass
        if time.perf_counter() - started > seconds:
            break
    return pairs, attempts, time.perf_counter() - started


def overlay_vs_copy(con, pairs) -> dict:
    """Medians over up to 60 pairs with table patches, overall and per touched table (copy cost grows with the
    table, overlay cost with the patch)."""
    catalog, per_table = source_catalog(con), {}
    overlay_s, copy_s, query_overlay, query_source = [], [], [], []
    for pair in [p for p in pairs if p.patch.tables][:60]:
        made = _overlay_time(con, pair.patch)
        overlay_s.append(made)
        for table in pair.patch.touched_tables:
            copied = _timed(lambda: con.execute(f'CREATE OR REPLACE TEMP TABLE __copy AS SELECT * FROM "{catalog}".main.{table}'))
            con.execute("DROP TABLE IF EXISTS __copy")
            copy_s.append(copied)
            per_table.setdefault(table, []).append((made, copied))
        query_source.append(_timed(lambda: con.sql(pair.clean.gold_sql).fetchall()))
        with overlay(con, pair.patch):
            query_overlay.append(_timed(lambda: con.sql(pair.clean.gold_sql).fetchall()))
    med = statistics.median
    tables = {
        table: {"pairs": len(v), "rows": con.sql(f'SELECT count(*) FROM "{catalog}".main.{table}').fetchall()[0][0],
                "overlay_ms": med(o for o, _ in v) * 1e3, "copy_ms": med(c for _, c in v) * 1e3,
                "copy_over_overlay": med(c for _, c in v) / med(o for o, _ in v)}
        for table, v in sorted(per_table.items())
    }
    return {"pairs_measured": len(overlay_s), "overlay_create_drop_ms": med(overlay_s) * 1e3, "copy_touched_tables_ms": med(copy_s) * 1e3,
            "copy_over_overlay": med(copy_s) / med(overlay_s), "by_table": tables, "query_on_source_ms": med(query_source) * 1e3,
            "query_on_overlay_ms": med(query_overlay) * 1e3, "overlay_query_over_source": med(query_overlay) / med(query_source)}


def _overlay_time(con, patch) -> float:
    started = time.perf_counter()
    with overlay(con, patch):
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("db", type=Path)
    parser.add_argument("--per-template", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=120.0, help="time budget for the pairs/minute measurement")
    args = parser.parse_args()
    con = duckdb.connect(str(args.db), read_only=True)
    templates = {t.id: t for t in load_templates()}
    started = time.perf_counter()
    tasks, _ = instantiate(con, list(templates.values()), args.per_template, seed=0)
    instantiate_s = time.perf_counter() - started
    pairs, attempts, spent = verify_for(con, tasks, templates, args.seconds)
    result = {"db": args.db.name, "patients": con.sql("SELECT count(*) FROM patients").fetchall()[0][0],
              "clean_tasks": len(tasks), "instantiate_seconds": instantiate_s, "verify_attempts": attempts,
              "verified_pairs": len(pairs), "verify_seconds": spent, "verified_pairs_per_minute": 60 * len(pairs) / spent,
              **overlay_vs_copy(con, pairs)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
