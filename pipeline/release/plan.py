"""Plan-first pairs: each clean task tries the sub-type its cell needs most, and the next one only on rejection.

Verifying every applicable sub-type of every task and publishing one pair per task throws most of the work away
(the demo release of session 20: 851 verified for 172 published). Here the tasks go in a seeded order, in waves:
in each wave every task still without a pair takes one untried sub-type: of the noise level its template holds
the fewest pairs of (verified, or planned earlier in the wave), the sub-type the template holds the fewest of,
then by name. The whole wave is verified (in parallel when there are workers), and the rejected tasks go on to
the next wave. So each template's tasks spread evenly over its levels and their sub-types, as far as they verify,
and the scope x level cells of the test split fill with every template that can serve them.
Query-level noise comes last (`FALLBACK_LEVEL`): a question naming an entity or concept the record lacks can be made
from nearly any clean task, while record and value noise verify on some only (population value noise on few: an
aggregate moves only where an impossible or re-expressed number reaches it, and the test split needs 168 of those).
Spread evenly, the levels left 3,241 of session 24's 5,634 published pairs patient-level query noise, and in session
25 the 120 tasks of the population maximum of a lab made 99 unknown_concept pairs and 21 value ones. A task takes
it when its record and value sub-types are spent. A sub-type that a template has rejected `DEAD_AFTER` times
without one pair is not tried again on its further tasks; until it has a pair, a wave tries it on no more of the
template's tasks than would make `DEAD_AFTER` (the first wave of session 26's 120-task templates tried each sub-type
on about 20, and a sub-type no task of a template verifies spent all 20; the others take their next sub-type, or
wait for the next wave when it is their last).
Everything is counted per template, so neither the worker count nor the sharding of templates changes a pair.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import duckdb
from pydantic import BaseModel, ConfigDict

from pipeline.noise.base import NoiseSubtype
from pipeline.noise.verify import NoisePair
from pipeline.release.pairs import IMPOSSIBLE, Attempt, Verifier, collect
from pipeline.templates.instantiate import CleanTask
from pipeline.templates.spec import Template

DEAD_AFTER = 6  # rejections of one template x sub-type, with no pair, after which it is not tried again
FALLBACK_LEVEL = "query"  # tried once a task's other levels are spent: it verifies on nearly any task


class PlanReport(BaseModel):
    """How much verification the plan spent: attempts per wave, and tasks left without a pair."""

    model_config = ConfigDict(extra="forbid")
    tasks: int = 0
    attempts: int = 0
    verified: int = 0
    waves: list[int] = []  # attempts per wave
    without_pair: int = 0  # tasks whose every applicable sub-type was rejected (or none applies)


def planned_pairs(
    con: duckdb.DuckDBPyConnection,
    tasks: list[CleanTask],
    templates: dict[str, Template],
    subtypes: dict[str, NoiseSubtype],
    seed: int,
    on_attempt: Callable[[int, int], None] | None = None,
    workers: int = 1,
    per_cell: int | None = None,
    snapshot: Path | None = None,
) -> tuple[dict[str, list[NoisePair]], Counter, PlanReport]:
    """At most one verified pair per clean task (by task id), the rejections by (template, sub-type, reason) and
    the plan's report. `per_cell` caps a template's pairs of one sub-type (a template holding `per_cell` pairs of
    an intent x scope x level x sub-type cell can fill the build's cap of that cell alone): it is not attempted
    again. `on_attempt(done, planned so far)` reports progress; `snapshot` is the source's Parquet snapshot."""
    options = {t.task_id: [n for n, s in subtypes.items() if s.applies(templates[t.template_id])] for t in tasks}
    pending = sorted(
        (t for t in tasks if options[t.task_id]),
        key=lambda t: hashlib.sha256(f"{seed}:plan:{t.task_id}".encode()).digest(),
    )
    state = _PlanState(subtypes, per_cell)
    verified: dict[str, list[NoisePair]] = {}
    rejected: Counter = Counter()
    report = PlanReport(tasks=len(tasks))
    with Verifier(con, templates, subtypes, seed, workers, snapshot) as verify:
        while pending:
            wave, waiting = [], set()
            for task in pending:
                if name := state.choose(task, options[task.task_id]):
                    wave.append((task, name))
                elif state.waits(task, options[task.task_id]):
                    waiting.add(task.task_id)
            if not wave:
                break
            report.waves.append(len(wave))
            results = verify(wave, _progress(on_attempt, report.attempts, len(wave)))
            report.attempts += len(wave)
            wave_verified, wave_rejected = collect(wave, results)
            verified.update(wave_verified)
            rejected.update(wave_rejected)
            going_on = {task.task_id for task in state.settle(wave, results)} | waiting
            pending = [task for task in pending if task.task_id in going_on]  # in the plan's seeded order
    report.verified = len(verified)
    report.without_pair = len(tasks) - len(verified)
    return verified, rejected, report


def _progress(on_attempt: Callable[[int, int], None] | None, before: int, size: int) -> Callable[[int], None] | None:
    """A wave's progress as the whole plan's: (attempts done, attempts planned so far)."""
    return None if on_attempt is None else lambda n: on_attempt(before + n, before + size)


class _PlanState:
    """Pairs per cell (verified, plus planned in the current wave), what each task tried, and each template x
    sub-type's record."""

    def __init__(self, subtypes: dict[str, NoiseSubtype], per_cell: int | None):
        self.subtypes, self.per_cell = subtypes, per_cell
        self.cells: Counter[tuple] = Counter()
        self.tried: dict[str, set[str]] = {}
        self.record: dict[tuple[str, str], list[int]] = {}  # (template, sub-type) -> [pairs, rejections]
        self.probing: Counter[tuple[str, str]] = Counter()  # (template, sub-type) with no pair -> attempts in flight
        self.probes: set[tuple[str, str]] = set()  # (task id, sub-type) of those attempts

    def _cells(self, task: CleanTask, name: str) -> tuple[tuple, tuple]:
        """The task's template's level and sub-type cells: a template's tasks spread over its levels, then over each
        level's sub-types (per template, so that splitting an intent's templates into shards changes nothing)."""
        level = self.subtypes[name].level
        return (task.template_id, level), (task.template_id, level, name)

    def _dead(self, task: CleanTask, name: str) -> bool:
        pairs, rejections = self.record.get((task.template_id, name), [0, 0])
        return pairs == 0 and rejections >= DEAD_AFTER

    def _probed_enough(self, task: CleanTask, name: str) -> bool:
        """The sub-type has no pair for the template, and its attempts in flight could already kill it."""
        pairs, rejections = self.record.get((task.template_id, name), [0, 0])
        return pairs == 0 and rejections + self.probing[(task.template_id, name)] >= DEAD_AFTER

    def _open(self, task: CleanTask, names: list[str]) -> list[str]:
        """The sub-types the task has not tried, alive for its template, whose cell is not full."""
        tried = self.tried.get(task.task_id, set())
        return [
            n
            for n in names
            if n not in tried
            and not self._dead(task, n)
            and (self.per_cell is None or self.cells[self._cells(task, n)[1]] < self.per_cell)
        ]

    def choose(self, task: CleanTask, names: list[str]) -> str | None:
        """The untried sub-type this task should try next in this wave (and count it as planned), or None."""
        open_names = [n for n in self._open(task, names) if not self._probed_enough(task, n)]
        if not open_names:
            return None
        name = min(
            open_names,
            key=lambda n: (
                self.subtypes[n].level == FALLBACK_LEVEL,
                self.cells[self._cells(task, n)[0]],
                self.cells[self._cells(task, n)[1]],
                n,
            ),
        )
        self.tried.setdefault(task.task_id, set()).add(name)
        if self.record.get((task.template_id, name), [0, 0])[0] == 0:
            self.probing[(task.template_id, name)] += 1
            self.probes.add((task.task_id, name))
        for cell in self._cells(task, name):
            self.cells[cell] += 1
        return name

    def waits(self, task: CleanTask, names: list[str]) -> bool:
        """(Where `choose` gave None) the task has sub-types left, all being probed on other tasks in this wave."""
        return bool(self._open(task, names))

    def settle(self, wave: list[Attempt], results: list[NoisePair | str]) -> list[CleanTask]:
        """Record the wave's results: a rejected attempt no longer counts as planned; its task goes on (unless its
        clean evidence is impossible, which no sub-type mends)."""
        pending = []
        for (task, name), result in zip(wave, results, strict=True):
            record = self.record.setdefault((task.template_id, name), [0, 0])
            if (task.task_id, name) in self.probes:
                self.probes.remove((task.task_id, name))
                self.probing[(task.template_id, name)] -= 1
            if isinstance(result, NoisePair):
                record[0] += 1
                continue
            for cell in self._cells(task, name):
                self.cells[cell] -= 1
            if result != IMPOSSIBLE:  # a task whose clean record needs mending says nothing of the sub-type
                record[1] += 1
                pending.append(task)
        return pending
