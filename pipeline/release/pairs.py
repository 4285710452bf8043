"""Make verified pairs: every applicable sub-type tried on every clean task, one pair kept per task."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import duckdb
import numpy as np

from pipeline.db import database_path, open_source
from pipeline.noise.base import NoiseSubtype, Rejected
from pipeline.noise.verify import NoisePair, impossible_evidence, verify_pair
from pipeline.templates.instantiate import CleanTask
from pipeline.templates.programs import Tables
from pipeline.templates.spec import Template
from pipeline.workers import die_with_parent


def candidate_pairs(
    con: duckdb.DuckDBPyConnection,
    tasks: list[CleanTask],
    templates: dict[str, Template],
    subtypes: dict[str, NoiseSubtype],
    seed: int,
    on_task: Callable[[int], None] | None = None,
    workers: int = 1,
) -> tuple[dict[str, list[NoisePair]], Counter]:
    """Per clean task, every verified pair (one per applicable sub-type); rejections counted by
    (template, sub-type, reason). With `workers` > 1, chunks of tasks run in worker processes, each on its
    own read-only connection; every pair is seeded by its task and sub-type, so the result is the same."""
    if workers > 1 and len(tasks) > CHUNK:
        return _parallel_pairs(database_path(con), tasks, templates, subtypes, seed, on_task, workers)
    tables = Tables(con)
    verified: dict[str, list[NoisePair]] = {}
    rejected: Counter[tuple[str, str, str]] = Counter()
    for done, task in enumerate(tasks, start=1):
        template = templates[task.template_id]
        impossible = None  # the clean evidence already holds an impossible number: checked once per task
        for name, subtype in subtypes.items():
            if not subtype.applies(template):
                continue
            if impossible is None:
                impossible = impossible_evidence(con, task)
            try:
                pair = verify_pair(con, tables, task, template, subtype, seed, evidence_possible=not impossible)
            except Rejected as exc:
                rejected[(template.id, name, exc.reason)] += 1
                continue
            verified.setdefault(task.task_id, []).append(pair)
        if on_task:
            on_task(done)
    return verified, rejected


CHUNK = 8  # tasks per unit of parallel work (small enough to balance two workers, large enough to amortise)
_worker: dict = {}


def _start_worker(db_path: str, templates: dict[str, Template], subtypes: dict[str, NoiseSubtype], seed: int) -> None:
    die_with_parent()
    _worker.update(con=open_source(db_path), templates=templates, subtypes=subtypes, seed=seed)


def _pairs_of_chunk(tasks: list[CleanTask]) -> tuple[dict[str, list[NoisePair]], Counter]:
    return candidate_pairs(_worker["con"], tasks, _worker["templates"], _worker["subtypes"], _worker["seed"])


def _parallel_pairs(db_path, tasks, templates, subtypes, seed, on_task, workers):
    """Chunks in task order through a spawn-started pool; results merged in submission order."""
    chunks = [tasks[i : i + CHUNK] for i in range(0, len(tasks), CHUNK)]
    verified: dict[str, list[NoisePair]] = {}
    rejected: Counter[tuple[str, str, str]] = Counter()
    done = 0
    context = multiprocessing.get_context("spawn")  # no fork of a process holding DuckDB threads
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(db_path, templates, subtypes, seed)
    ) as pool:
        for chunk, (chunk_verified, chunk_rejected) in zip(chunks, pool.map(_pairs_of_chunk, chunks), strict=True):
            verified.update(chunk_verified)
            rejected.update(chunk_rejected)
            done += len(chunk)
            if on_task:
                on_task(done)
    return verified, rejected


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
