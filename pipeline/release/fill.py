"""Fill the intent x sub-type cells no verified pair covers: further clean tasks of the templates the sub-type
applies to, verified for that sub-type only, until the cell holds `want` pairs or the draw is spent.

A sub-type that applies to a template can still reject every sampled task of it for good reasons (on the demo,
a hidden admission's time is placed by its own events for 17 of 20 first-day lab questions); the build then
draws more tasks for that cell instead of publishing an intent without the sub-type. Each cell's attempts and
rejections are counted like the others'; a cell the draw cannot fill is reported as such."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import duckdb
from pydantic import BaseModel, ConfigDict

from pipeline.noise.base import NoiseSubtype
from pipeline.noise.verify import NoisePair
from pipeline.release.pairs import CHUNK, Verifier, collect
from pipeline.templates.instantiate import CleanTask, InstantiationReport, more_tasks
from pipeline.templates.spec import Template

Cell = tuple[str, str]  # (intent, sub-type)


class CellFill(BaseModel):
    """What filling one cell took: further clean tasks tried, pairs verified, pairs kept."""

    model_config = ConfigDict(extra="forbid")
    templates: list[str]
    tried: int = 0
    verified: int = 0
    kept: int = 0


def applicable_cells(templates: list[Template], subtypes: dict[str, NoiseSubtype]) -> dict[Cell, list[Template]]:
    """(intent, sub-type) -> the templates of the intent that list the sub-type and that it applies to."""
    cells: dict[Cell, list[Template]] = {}
    for template in templates:
        for name in template.spec.noise:
            if name in subtypes and subtypes[name].applies(template):
                cells.setdefault((template.spec.intent, name), []).append(template)
    return dict(sorted(cells.items()))


def empty_cells(
    verified: dict[str, list[NoisePair]], templates: list[Template], subtypes: dict[str, NoiseSubtype]
) -> dict[Cell, list[Template]]:
    """The applicable cells without a verified pair."""
    covered = {(p.clean.intent, p.subtype) for pairs in verified.values() for p in pairs}
    return {cell: ts for cell, ts in applicable_cells(templates, subtypes).items() if cell not in covered}


def fill_cells(
    con: duckdb.DuckDBPyConnection,
    tasks: list[CleanTask],
    verified: dict[str, list[NoisePair]],
    templates: list[Template],
    subtypes: dict[str, NoiseSubtype],
    seed: int,
    *,
    draw: int,
    want: int,
    drawing: InstantiationReport,
    on_cell: Callable[[int, int], None] | None = None,
    snapshot: Path | None = None,
    workers: int = 1,
) -> tuple[dict[str, list[NoisePair]], Counter, dict[str, CellFill]]:
    """Pairs for the empty cells (by clean task id; one sub-type per task, a task fills one cell), the
    rejections met on the way by (template, sub-type, reason), and what each cell took; `drawing` counts the
    further clean tasks kept and the candidates dropped. `draw` further tasks per template of a cell are tried in
    chunks, in round-robin order over its templates, until `want` verify: a cell stops at the chunk that fills it.
    `workers` processes draw the tasks and verify `workers` chunks at once; what the chunks after the filling one
    found is not used or counted, so the files do not depend on the number of workers."""
    empty = empty_cells(verified, templates, subtypes)
    by_id = {t.id: t for t in templates}
    needed = [by_id[i] for i in dict.fromkeys(t.id for cell_templates in empty.values() for t in cell_templates)]
    known = {t.task_id for t in tasks}
    drawn = more_tasks(con, needed, draw, seed, known, drawing, workers, snapshot)
    found: dict[str, list[NoisePair]] = {}
    rejected: Counter = Counter()
    report: dict[str, CellFill] = {}
    with Verifier(con, by_id, subtypes, seed, workers, snapshot) as verify:
        for done, ((intent, name), cell_templates) in enumerate(empty.items(), start=1):
            queue = [t for t in _round_robin([drawn[t.id] for t in cell_templates]) if t.task_id not in found]
            fill = report[f"{intent}/{name}"] = CellFill(templates=[t.id for t in cell_templates])
            _fill_cell(verify, queue, name, want, fill, found, rejected)
            if on_cell:
                on_cell(done, len(empty))
    return found, rejected, report


def _fill_cell(verify: Verifier, queue, name: str, want: int, fill: CellFill, found: dict, rejected: Counter) -> None:
    """Verify the queue's tasks for sub-type `name`, a round of `workers` chunks at a time, and take the chunks in
    order up to the one that fills the cell."""
    round_size = CHUNK * max(1, verify.workers)
    for start in range(0, len(queue), round_size):
        attempts = [(task, name) for task in queue[start : start + round_size]]
        results = verify(attempts)
        for at in range(0, len(attempts), CHUNK):
            chunk = attempts[at : at + CHUNK]
            pairs, chunk_rejected = collect(chunk, results[at : at + CHUNK])
            rejected.update(chunk_rejected)
            fill.tried += len(chunk)
            fill.verified += len(pairs)
            for task, _ in chunk:
                if task.task_id in pairs and fill.kept < want:
                    found[task.task_id] = pairs[task.task_id]
                    fill.kept += 1
            if fill.kept >= want:
                return


def _round_robin(lists: list[list[CleanTask]]) -> list[CleanTask]:
    """The first of each list, then the second of each, and so on."""
    longest = max(map(len, lists), default=0)
    return [items[i] for i in range(longest) for items in lists if i < len(items)]
