"""Benchmark: load the real MIMIC-IV demo (+ reconstructed chartevents) and run the source gate; report time and rows/s.

Usage: python benchmarks/bench_load.py [--repeat 3]   (reads ../shared/data; writes benchmarks/results/load.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DEMO, CHART = SHARED / "mimic-iv-demo-2.2", SHARED / "chartevents-from-meds" / "chartevents.csv.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not DEMO.is_dir() or not CHART.is_file():
        sys.exit(f"benchmark needs the demo at {DEMO} and {CHART}")
    from pipeline.source.loader import load_mimic, total_bytes

    loads, rows = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            report = load_mimic(DEMO, Path(tmp) / f"demo{i}.duckdb", substitutes={"chartevents": CHART})
            loads.append(report.seconds)
            rows = report.total_rows
        started = time.perf_counter()
        from pipeline.quality.source_gate import validate_source

        imported = time.perf_counter()
        gate = validate_source(Path(tmp) / "demo0.duckdb")
        finished = time.perf_counter()
    size = total_bytes(DEMO, {"chartevents": CHART})
    median = statistics.median(loads)
    result = {
        "load_seconds_median": round(median, 3),
        "load_seconds_all": [round(s, 3) for s in loads],
        "rows": rows,
        "rows_per_second": round(rows / median),
        "compressed_mb_per_second": round(size / 1e6 / median, 2),
        "gate_import_seconds": round(imported - started, 2),
        "gate_validate_seconds": round(finished - imported, 2),
        "gate_success": gate.success,
    }
    (ROOT / "benchmarks" / "results" / "load.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
