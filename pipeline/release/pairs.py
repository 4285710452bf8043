"""Make verified pairs: every applicable sub-type tried on every clean task, one pair kept per task."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import duckdb
import numpy as np

from pipeline.noise.base import NoiseSubtype, Rejected
from pipeline.noise.verify import NoisePair, verify_pair
from pipeline.templates.instantiate import CleanTask
from pipeline.templates.programs import Tables
from pipeline.templates.spec import Template


def candidate_pairs(
    con: duckdb.DuckDBPyConnection,
    tasks: list[CleanTask],
    templates: dict[str, Template],
    subtypes: dict[str, NoiseSubtype],
    seed: int,
    on_task: Callable[[int], None] | None = None,
) -> tuple[dict[str, list[NoisePair]], Counter]:
    """Per clean task, every verified pair (one per applicable sub-type); rejections counted by
    (template, sub-type, reason)."""
    tables, verified, rejected = Tables(con), {}, Counter()
    for done, task in enumerate(tasks, start=1):
        template = templates[task.template_id]
        for name, subtype in subtypes.items():
            if not subtype.applies(template):
                continue
            try:
                pair = verify_pair(con, tables, task, template, subtype, seed)
            except Rejected as exc:
                rejected[(template.id, name, exc.reason)] += 1
                continue
            verified.setdefault(task.task_id, []).append(pair)
        if on_task:
            on_task(done)
    return verified, rejected


def choose_pairs(verified: dict[str, list[NoisePair]], seed: int) -> list[NoisePair]:
    """One pair per clean task (a clean question appears once), levels kept as even as the pool allows:
    each task, in a seeded order, takes a pair of the least-chosen level it has, then of the
    least-chosen sub-type within it."""
    rng = np.random.default_rng(seed)
    chosen, per_level, per_subtype = [], Counter(), Counter()
    task_ids = sorted(verified)
    for task_id in [task_ids[i] for i in rng.permutation(len(task_ids))]:
        options = sorted(verified[task_id], key=lambda p: (per_level[p.level], per_subtype[p.subtype], p.subtype))
        pair = options[0]
        chosen.append(pair)
        per_level[pair.level] += 1
        per_subtype[pair.subtype] += 1
    return sorted(chosen, key=lambda p: p.pair_id)
