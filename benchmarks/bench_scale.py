"""Benchmark a build at scale in one run: a synthetic source of N patients generated in chunks by `ehrgym synth` (or
reused when it is there), its Parquet snapshot, and one release build on it; generation time and peak RSS, rows,
disk sizes, the build's seconds per stage, its pairs and the peak RSS of every process (`bench_build.one_build`).
The full-scale proof of issue 14 is `make proof` (100,000 patients, about 1 billion rows, the stand-in for full
MIMIC-IV). Nothing asserts a timing: it measures.

Usage: python benchmarks/bench_scale.py --patients N [--per-template K] [--workers W] [--db PATH] [--out FILE]
(writes benchmarks/results/scale-<N>.json by default).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_build import one_build

from pipeline.db import open_source
from pipeline.source.schema import TABLE_NAMES
from pipeline.source.snapshot import ensure_snapshot
from pipeline.workers import WORKER_MEMORY

ROOT = Path(__file__).resolve().parents[1]


def generated(db: Path, patients: int, seed: int) -> dict:
    """Generate the source unless it is there; its generation figures (kept beside it, so a reused source still
    reports how long it took)."""
    figures = db.with_name(db.name + ".synth.json")
    if db.is_file():  # never generated over: an existing source is reused, its figures only where they were kept
        return json.loads(figures.read_text()) if figures.is_file() else {"reused": str(db), "seconds": None}
    db.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pipeline.cli", "synth", "--db", str(db), "--patients", str(patients)]
    started = time.perf_counter()
    subprocess.run([*command, "--seed", str(seed)], check=True, cwd=ROOT)
    result = {
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        "command": f"ehrgym synth --db {db} --patients {patients} --seed {seed}",
    }
    figures.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-template", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--db", type=Path, help="default: data/synthetic-<N>-seed<S>.duckdb")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/scale-<N>.json")
    args = parser.parse_args()
    db = args.db or ROOT / "data" / f"synthetic-{args.patients}-seed{args.seed}.duckdb"
    out = args.out or ROOT / "benchmarks" / "results" / f"scale-{args.patients}.json"
    generation = generated(db, args.patients, args.seed)
    with open_source(db) as con:
        rows = {table: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] for table in TABLE_NAMES}
    started = time.perf_counter()
    snapshot = ensure_snapshot(db)
    snapshot_seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        build = one_build(db, args.per_template, args.workers, Path(tmp))
    result = {
        "patients": args.patients,
        "rows": sum(rows.values()),
        "rows_by_table": rows,
        "generation": generation,
        "db_mib": round(db.stat().st_size / 2**20),
        "snapshot_mib": round(sum(p.stat().st_size for p in snapshot.iterdir()) / 2**20),
        "snapshot_seconds": round(snapshot_seconds, 1),
        "per_template": args.per_template,
        "duckdb_memory_limit": os.environ.get(
            "EHRGYM_DUCKDB_MEMORY", f"DuckDB's default (80% of RAM) in this process, {WORKER_MEMORY} in each worker"
        ),
        "cpus": os.cpu_count(),
        "build": build,
        "command": f"python benchmarks/bench_scale.py --patients {args.patients} --per-template {args.per_template} "
        f"--workers {args.workers}",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
