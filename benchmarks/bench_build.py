"""Benchmark the release build end to end in one run: the whole chain (`pipeline.stages.run_build`) on one source
with 1 and then 2 worker processes, seconds per stage, verified and published pairs per minute, verifications per
published pair, and the peak resident memory of every process (the build's and each worker's, from the kernel's
VmHWM), and whether the two releases are byte-identical (the worker count must never change a file).

Usage: python benchmarks/bench_build.py DB [--per-template K] [--workers 1,2] [--out FILE]
(writes benchmarks/results/build.json by default). The source's Parquet snapshot is made before the first build
and timed on its own. Nothing asserts a timing: it measures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline import stages
from pipeline.build import BuildConfig
from pipeline.source.snapshot import ensure_snapshot
from pipeline.stage_table import STAGE_TABLE
from pipeline.workers import WORKER_MEMORY

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "build.json"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _peak_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakMemory:
    """Polls the peak RSS (VmHWM) of this process and of every process below it, until stopped."""

    def __init__(self, every: float = 0.5):
        self.every, self._stop = every, threading.Event()
        self.peaks: dict[int, int] = {}  # pid -> peak RSS in KiB
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pids, queue = [], [os.getpid()]
            while queue:
                pid = queue.pop()
                pids.append(pid)
                queue += _children(pid)
            for pid in pids:
                if (peak := _peak_kib(pid)) is not None:
                    self.peaks[pid] = max(peak, self.peaks.get(pid, 0))
            self._stop.wait(self.every)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@contextmanager
def timed_stages() -> Iterator[dict[str, float]]:
    """Seconds spent in each stage function of the stage table (summed over shards), while the block runs."""
    spent: dict[str, float] = {}
    originals = {stage.name: getattr(stages, stage.function) for stage in STAGE_TABLE}

    def timed(name: str, function: Callable) -> Callable:
        def run(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - started

        return run

    for stage in STAGE_TABLE:
        setattr(stages, stage.function, timed(stage.name, originals[stage.name]))
    try:
        yield spent
    finally:
        for stage in STAGE_TABLE:
            setattr(stages, stage.function, originals[stage.name])


def one_build(db: Path, per_template: int, workers: int, releases: Path) -> dict:
    # one version name in separate folders: the name is written into the release, so names per worker count would
    # make the byte comparison fail by construction (the session-25 run's `false` was that)
    config = BuildConfig(db=db, releases_dir=releases, version="bench", per_template=per_template)
    started = time.perf_counter()
    with PeakMemory() as memory, timed_stages() as spent:
        release = stages.run_build(config, workers=workers, skip_source_gate=True)
    seconds = time.perf_counter() - started
    pairs = json.loads((release / "manifest.json").read_text())["pairs"]
    me = os.getpid()
    workers_peaks = sorted((kib for pid, kib in memory.peaks.items() if pid != me), reverse=True)
    return {
        "workers": workers,
        "seconds": round(seconds, 1),
        "seconds_by_stage": {name: round(value, 1) for name, value in spent.items()},
        "verified": pairs["verified"],
        "published": pairs["published"],
        "test": pairs["split"]["test"],
        "verifications": pairs["verifications"],
        "verifications_per_published": pairs["verifications_per_published"],
        "verified_per_minute": round(60 * pairs["verified"] / seconds, 1),
        "published_per_minute": round(60 * pairs["published"] / seconds, 1),
        "peak_rss_mib": {
            "build": round(memory.peaks.get(me, 0) / 1024),
            "workers": [round(kib / 1024) for kib in workers_peaks],
            "all_at_their_peaks": round(sum(memory.peaks.values()) / 1024),
        },
        "release_digest": _tree_digest(release),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--per-template", type=int, default=10)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts, one build each")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.perf_counter()
    snapshot = ensure_snapshot(args.db)
    snapshot_seconds = time.perf_counter() - started
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        for workers in (int(w) for w in args.workers.split(",")):
            runs.append(one_build(args.db, args.per_template, workers, Path(tmp) / f"w{workers}"))
            print(json.dumps(runs[-1], indent=1))
    result = {
        "db": args.db.name,
        "db_mib": round(args.db.stat().st_size / 2**20),
        "snapshot_mib": round(sum(p.stat().st_size for p in snapshot.iterdir()) / 2**20),
        "snapshot_seconds": round(snapshot_seconds, 1),
        "per_template": args.per_template,
        "duckdb_memory_limit": os.environ.get(
            "EHRGYM_DUCKDB_MEMORY", f"DuckDB's default (80% of RAM) in this process, {WORKER_MEMORY} in each worker"
        ),
        "cpus": os.cpu_count(),
        "runs": runs,
        "same_release_for_every_worker_count": len({run["release_digest"] for run in runs}) == 1,
        "command": f"python benchmarks/bench_build.py {args.db} --per-template {args.per_template} "
        f"--workers {args.workers}",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
