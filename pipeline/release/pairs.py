"""Verify (clean task, sub-type) attempts, in this process or a worker pool, and keep one pair per clean task."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import duckdb
import numpy as np

from pipeline.db import database_path, open_source
from pipeline.noise.base import NoiseSubtype, Rejected
from pipeline.noise.verify import NoisePair, impossible_evidence, verify_pair
from pipeline.templates.instantiate import CleanTask
from pipeline.templates.programs import Tables
from pipeline.templates.spec import Template
from pipeline.workers import spawn_pool

Attempt = tuple[CleanTask, str]  # a clean task and the name of the sub-type to verify on it


def verify_attempts(
    con: duckdb.DuckDBPyConnection,
    tables: Tables,
    attempts: list[Attempt],
    templates: dict[str, Template],
    subtypes: dict[str, NoiseSubtype],
    seed: int,
    impossible: dict[str, bool] | None = None,
) -> list[NoisePair | str]:
    """Each attempt's verified pair, or the reason it was rejected. A task's clean evidence is checked for
    impossible numbers once for all its attempts (`impossible`: task id -> found, kept across calls)."""
    impossible = {} if impossible is None else impossible
    results: list[NoisePair | str] = []
    for task, name in attempts:
        if task.task_id not in impossible:
            impossible[task.task_id] = impossible_evidence(con, task)
        if impossible[task.task_id]:
            results.append(IMPOSSIBLE)  # the clean record needs mending before it answers
            continue
        template = templates[task.template_id]
        try:
            results.append(verify_pair(con, tables, task, template, subtypes[name], seed, evidence_possible=True))
        except Rejected as exc:
            results.append(exc.reason)
    return results


IMPOSSIBLE = "clean_evidence_impossible"
CHUNK = 8  # attempts per unit of parallel work (small enough to balance two workers, large enough to amortise)
_worker: dict = {}


class Verifier:
    """Verifies lists of attempts, in this process or (`workers` > 1) in a pool of spawn-started processes, each
    on its own read-only connection, that lives as long as the `with` block. Every pair is seeded by its task and
    sub-type, so the results do not depend on the number of workers; they come back in the attempts' order."""

    def __init__(
        self,
        con,
        templates: dict[str, Template],
        subtypes: dict[str, NoiseSubtype],
        seed: int,
        workers: int = 1,
        snapshot: Path | None = None,
    ):
        self.con, self.templates, self.subtypes, self.seed, self.workers = con, templates, subtypes, seed, workers
        self.snapshot = snapshot  # the source's Parquet snapshot: whole tables scanned lazily, not held
        self.tables = Tables(con, snapshot=snapshot)
        self.impossible: dict[str, bool] = {}  # task id -> its clean evidence holds an impossible number
        self.pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def __call__(self, attempts: list[Attempt], on_chunk: Callable[[int], None] | None = None) -> list[NoisePair | str]:
        """Results in the attempts' order; `on_chunk(attempts done)` after each chunk."""
        if self.workers <= 1 or len(attempts) <= CHUNK:
            results = verify_attempts(
                self.con, self.tables, attempts, self.templates, self.subtypes, self.seed, self.impossible
            )
            if on_chunk:
                on_chunk(len(attempts))
            return results
        if self.pool is None:
            self.pool = spawn_pool(
                self.workers,
                _start_worker,
                (database_path(self.con), self.templates, self.subtypes, self.seed, self.snapshot),
            )
        chunks = [attempts[i : i + CHUNK] for i in range(0, len(attempts), CHUNK)]
        results, done = [], 0
        for chunk, chunk_results in zip(chunks, self.pool.map(_verify_chunk, chunks), strict=True):
            results += chunk_results
            done += len(chunk)
            if on_chunk:
                on_chunk(done)
        return results


def _start_worker(db_path: str, templates, subtypes, seed: int, snapshot: Path | None) -> None:
    con = open_source(db_path)
    _worker.update(
        con=con, tables=Tables(con, snapshot=snapshot), templates=templates, subtypes=subtypes, seed=seed, impossible={}
    )


def _verify_chunk(attempts: list[Attempt]) -> list[NoisePair | str]:
    w = _worker
    return verify_attempts(w["con"], w["tables"], attempts, w["templates"], w["subtypes"], w["seed"], w["impossible"])


def collect(attempts: list[Attempt], results: list[NoisePair | str]) -> tuple[dict[str, list[NoisePair]], Counter]:
    """Verified pairs by clean task id (in the attempts' order) and rejections by (template, sub-type, reason)."""
    verified: dict[str, list[NoisePair]] = {}
    rejected: Counter[tuple[str, str, str]] = Counter()
    for (task, name), result in zip(attempts, results, strict=True):
        if isinstance(result, NoisePair):
            verified.setdefault(task.task_id, []).append(result)
        else:
            rejected[(task.template_id, name, result)] += 1
    return verified, rejected


def candidate_pairs(
    con: duckdb.DuckDBPyConnection,
    tasks: list[CleanTask],
    templates: dict[str, Template],
    subtypes: dict[str, NoiseSubtype],
    seed: int,
    on_task: Callable[[int], None] | None = None,
    workers: int = 1,
    snapshot: Path | None = None,
) -> tuple[dict[str, list[NoisePair]], Counter]:
    """Every applicable sub-type tried on every clean task: per task, every verified pair (in sub-type order);
    rejections counted by (template, sub-type, reason). `on_task(attempts done)` reports progress."""
    attempts = [
        (task, name)
        for task in tasks
        for name, subtype in subtypes.items()
        if subtype.applies(templates[task.template_id])
    ]
    with Verifier(con, templates, subtypes, seed, workers, snapshot) as verify:
        return collect(attempts, verify(attempts, on_task))


def choose_pairs(verified: dict[str, list[NoisePair]], seed: int) -> list[NoisePair]:
    """One pair per clean task (a clean question appears once), every scope x level cell and every sub-type some
    task verifies published, then sub-types as even as the pool allows (and so cells): each task, in a seeded order,
    takes a pair of an empty cell (the rarest), else of a sub-type not chosen yet (the rarest), else of the
    least-chosen sub-type, then of the least-chosen cell. A trap (the careless reading answers, wrongly) counts as
    one pick fewer, so a task prefers a pair that separates careful from careless agents over one a careless agent
    passes by finding nothing, and sub-types stay within one pick of even. (Blind audit 34's release had no
    out_of_window pair, never a trap, though three tasks verified one; the test split needs every cell.)"""
    rng = np.random.default_rng(seed)
    chosen: list[NoisePair] = []
    per_cell: Counter[tuple[str, str]] = Counter()
    per_subtype: Counter[str] = Counter()
    offered = Counter(key for pairs in verified.values() for p in pairs for key in (p.subtype, _cell(p)))
    task_ids = sorted(verified)
    for task_id in [task_ids[i] for i in rng.permutation(len(task_ids))]:
        options = sorted(
            verified[task_id],
            key=lambda p: (
                per_cell[_cell(p)] > 0,
                0 if per_cell[_cell(p)] else offered[_cell(p)],  # the rarest empty cell first
                per_subtype[p.subtype] > 0,
                0 if per_subtype[p.subtype] else offered[p.subtype],  # the rarest sub-type not chosen yet first
                per_subtype[p.subtype] + (not p.trap),
                per_cell[_cell(p)],
                p.subtype,
            ),
        )
        pair = options[0]
        chosen.append(pair)
        per_cell[_cell(pair)] += 1
        per_subtype[pair.subtype] += 1
    return sorted(chosen, key=lambda p: p.pair_id)


def _cell(pair: NoisePair) -> tuple[str, str]:
    return pair.clean.scope, pair.level
