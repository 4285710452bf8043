"""Benchmark the synthetic generator at several sizes, each in a fresh subprocess (time, rows, peak RSS).

Usage: python benchmarks/bench_synth.py [N ...]   (default 1000 5000 10000); writes benchmarks/results/synth.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "synth.json"
DEFAULT_SIZES = (1_000, 5_000, 10_000)
SEED = 42

CHILD = """
import json, resource, sys, time
from pathlib import Path
from pipeline.source.synthetic import generate_synthetic
start = time.perf_counter()
rows = generate_synthetic(Path(sys.argv[1]), int(sys.argv[2]), seed=int(sys.argv[3]))
seconds = time.perf_counter() - start
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "rows": sum(rows.values()), "peak_rss_mb": peak_mb,
                  "db_mb": Path(sys.argv[1]).stat().st_size / 2**20, "rows_per_table": rows}))
"""


def run_one(patients: int) -> dict:
    """Generate `patients` into a throwaway file in a fresh interpreter; its own measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "synthetic.duckdb"
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(db), str(patients), str(SEED)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["patients"] = patients
    result["rows_per_second"] = result["rows"] / result["seconds"]
    result["seconds_per_1000_patients"] = result["seconds"] / patients * 1000
    return result


def print_table(results: list[dict]) -> None:
    header = f"{'N':>7} {'seconds':>8} {'rows':>12} {'rows/s':>10} {'peak RSS MB':>12} {'s/1000 pts':>11}"
    print(header)
    for r in results:
        print(
            f"{r['patients']:>7} {r['seconds']:>8.1f} {r['rows']:>12,} {r['rows_per_second']:>10,.0f} "
            f"{r['peak_rss_mb']:>12.0f} {r['seconds_per_1000_patients']:>11.2f}"
        )


def main(sizes: list[int]) -> None:
    results = []
    for n in sizes:
        results.append(run_one(n))
        print_table(results[-1:] if len(results) > 1 else results)
    print()
    print_table(results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"seed": SEED, "results": results}, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or list(DEFAULT_SIZES))
