"""Benchmark the noise engine in one run: overlay vs copying the touched tables, a query on an overlay vs on
the source, verified pairs per minute (one process, then a worker pool), and the pair counts by intent and
sub-type with the rejection reasons, and the cells the build's fill stage fills from further tasks.

Usage: python benchmarks/bench_noise.py DB [--per-template K] [--seconds S] [--workers W] [--out FILE]
(writes benchmarks/results/noise.json by default). Tasks are visited in a seeded random order, so a time budget
samples every template. Ratios are measured in the same run on the same machine; nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np

from pipeline.db import open_source
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import overlay, source_catalog
from pipeline.noise.verify import verify_pair
from pipeline.release.fill import applicable_cells, fill_cells
from pipeline.release.pairs import candidate_pairs
from pipeline.templates.instantiate import InstantiationReport, instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "noise.json"


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def verify_for(con, tasks, templates, seconds: float) -> tuple[list, Counter, float, int]:
    """Verify pairs (every applicable sub-type per task) until the time budget is spent; (pairs, rejections,
    seconds, tasks visited)."""
    rejected: Counter[tuple[str, str]] = Counter()
    tables, pairs, started, visited = Tables(con), [], time.perf_counter(), 0
    for visited, task in enumerate(tasks, start=1):  # noqa: B007 (the count is returned)
        for subtype in subtypes().values():
            if not subtype.applies(templates[task.template_id]):
                continue
            try:
                pairs.append(verify_pair(con, tables, task, templates[task.template_id], subtype, seed=0))
            except Rejected as exc:
                rejected[(subtype.name, exc.reason)] += 1
        if time.perf_counter() - started > seconds:
            break
    return pairs, rejected, time.perf_counter() - started, visited


def parallel_rate(con, tasks, templates, workers: int) -> dict:
    """The same verification of the given tasks through candidate_pairs' worker pool (start-up included)."""
    started = time.perf_counter()
    verified, _ = candidate_pairs(con, tasks, templates, subtypes(), 0, workers=workers)
    spent, count = time.perf_counter() - started, sum(map(len, verified.values()))
    return {
        "workers": workers,
        "tasks": len(tasks),
        "verified_pairs": count,
        "seconds": spent,
        "verified_pairs_per_minute": 60 * count / spent,
    }


def pair_counts(pairs, rejected: Counter, applicable: set[tuple[str, str]]) -> dict:
    """Verified pairs per intent x sub-type, the applicable cells without a pair, and rejections per sub-type and
    reason."""
    cells: dict = {}
    for pair in pairs:
        cells.setdefault(pair.clean.intent, Counter())[pair.subtype] += 1
    reasons: dict = {}
    for (name, reason), count in sorted(rejected.items()):
        reasons.setdefault(name, {})[reason] = count
    empty = sorted(f"{i}/{n}" for i, n in applicable if not cells.get(i, {}).get(n))
    return {
        "verified_by_intent_and_subtype": {i: dict(sorted(c.items())) for i, c in sorted(cells.items())},
        "applicable_without_pairs": empty,
        "rejected": reasons,
    }


def after_fill(con, tasks, pairs, templates, per_template: int, draw: int = 24) -> dict:
    """What the build's fill stage adds: per applicable cell without a pair, the further tasks tried and pairs
    kept, and the cells still empty after it."""
    verified: dict = {}
    for pair in pairs:
        verified.setdefault(pair.clean.task_id, []).append(pair)
    _, _, cells = fill_cells(
        con,
        tasks,
        verified,
        list(templates.values()),
        subtypes(),
        0,
        draw=draw,
        want=per_template,
        drawing=InstantiationReport(),
    )
    return {
        "filled_cells": {cell: fill.model_dump() for cell, fill in cells.items()},
        "applicable_without_pairs_after_fill": sorted(cell for cell, fill in cells.items() if not fill.kept),
    }


def markdown_counts(counts: dict, applicable: set[tuple[str, str]]) -> str:
    """The pair counts as a Markdown table (intents as rows, sub-types as columns; '-' where no template of the
    intent takes the sub-type, **0** where one does but no pair was verified)."""
    cells = counts["verified_by_intent_and_subtype"]
    names = sorted(subtypes())

    def cell(intent: str, name: str) -> str:
        count = cells.get(intent, {}).get(name)
        return str(count) if count else ("**0**" if (intent, name) in applicable else "-")

    lines = ["| intent | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [
        f"| {intent} | " + " | ".join(cell(intent, n) for n in names) + " |"
        for intent in sorted({i for i, _ in applicable})
    ]
    return "\n".join(lines)


def overlay_vs_copy(con, pairs) -> dict:
    """Medians over up to 60 pairs with table patches, overall and per touched table (copy cost grows with the
    table, overlay cost with the patch)."""
    catalog = source_catalog(con)
    per_table: dict[str, list[tuple[float, float]]] = {}
    overlay_s, copy_s, query_overlay, query_source, query_unordered = [], [], [], [], []
    for pair in [p for p in pairs if p.patch.tables][:60]:
        made = _overlay_time(con, pair.patch)
        overlay_s.append(made)
        for table in pair.patch.touched_tables:
            copied = _timed(
                lambda: con.execute(f'CREATE OR REPLACE TEMP TABLE __copy AS SELECT * FROM "{catalog}".main.{table}')
            )
            con.execute("DROP TABLE IF EXISTS __copy")
            copy_s.append(copied)
            per_table.setdefault(table, []).append((made, copied))
        query_source.append(_timed(lambda: con.sql(pair.clean.gold_sql).fetchall()))
        with overlay(con, pair.patch):
            query_overlay.append(_timed(lambda: con.sql(pair.clean.gold_sql).fetchall()))
        with overlay(con, pair.patch, ordered=False):  # verification's: no whole-table sort
            query_unordered.append(_timed(lambda: con.sql(pair.clean.gold_sql).fetchall()))
    med = statistics.median
    tables = {
        table: {
            "pairs": len(v),
            "rows": con.sql(f'SELECT count(*) FROM "{catalog}".main.{table}').fetchall()[0][0],
            "overlay_ms": med(o for o, _ in v) * 1e3,
            "copy_ms": med(c for _, c in v) * 1e3,
            "copy_over_overlay": med(c for _, c in v) / med(o for o, _ in v),
        }
        for table, v in sorted(per_table.items())
    }
    return {
        "pairs_measured": len(overlay_s),
        "overlay_create_drop_ms": med(overlay_s) * 1e3,
        "copy_touched_tables_ms": med(copy_s) * 1e3,
        "copy_over_overlay": med(copy_s) / med(overlay_s),
        "by_table": tables,
        "query_on_source_ms": med(query_source) * 1e3,
        "query_on_overlay_ms": med(query_overlay) * 1e3,
        "overlay_query_over_source": med(query_overlay) / med(query_source),
        "query_on_unordered_overlay_ms": med(query_unordered) * 1e3,
        "ordered_over_unordered_query": sum(query_overlay) / sum(query_unordered),  # total time over the pairs
    }


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
    parser.add_argument("--workers", type=int, default=2, help="worker processes for the parallel rate (0: skip)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    con = open_source(args.db)
    templates = {t.id: t for t in load_templates()}
    started = time.perf_counter()
    tasks, _ = instantiate(con, list(templates.values()), args.per_template, seed=0)
    instantiate_s = time.perf_counter() - started
    tasks = [tasks[i] for i in np.random.default_rng(0).permutation(len(tasks))]
    pairs, rejected, spent, visited = verify_for(con, tasks, templates, args.seconds)
    parallel = parallel_rate(con, tasks[:visited], templates, args.workers) if args.workers > 1 else None
    applicable = set(applicable_cells(list(templates.values()), subtypes()))
    counts = pair_counts(pairs, rejected, applicable)
    # the fill stage's further draw, where the budget visited every task (as a build does)
    filled = after_fill(con, tasks, pairs, templates, args.per_template) if visited == len(tasks) else {}
    result = {
        "db": args.db.name,
        "patients": con.sql("SELECT count(*) FROM patients").fetchall()[0][0],
        "templates": len(templates),
        "clean_tasks": len(tasks),
        "instantiate_seconds": instantiate_s,
        "tasks_visited": visited,
        "verify_attempts": len(pairs) + sum(rejected.values()),
        "verified_pairs": len(pairs),
        "verify_seconds": spent,
        "verified_pairs_per_minute": 60 * len(pairs) / spent,
        "parallel": parallel,
        **counts,
        **filled,
        **overlay_vs_copy(con, pairs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("by_table", "rejected")}, indent=2))
    print(markdown_counts(counts, applicable))


if __name__ == "__main__":
    main()
