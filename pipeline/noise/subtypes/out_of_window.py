"""out_of_window (query level): the question's time window moves to one that holds no record; abstain.

Templates with a `window_start` / `window_end` pair of date slots qualify. The window keeps its length and
moves by whole lengths, nearest first, earlier or later as the seed says, until the gold program finds nothing
there: the record the clean question asked about stays just outside, where a reader who takes the nearest
measurement finds it (the trap). Where records are dense (a population question over a large database), the
moves then double, up to centuries, until the window leaves the period the record covers.
"""

from __future__ import annotations

import datetime as dt

from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.slot_swap import gold_finds_nothing, swapped_twin
from pipeline.templates.instantiate import typed_slots

WINDOW_SLOTS = ("window_start", "window_end")
NEAR_SHIFTS = tuple(range(1, 13))  # window lengths tried on each side first (each costs one gold query)
FAR_SHIFTS = tuple(2 ** k for k in range(4, 15))  # then 16, 32, ... 16,384 lengths away


@register
class OutOfWindow(NoiseSubtype):
    name = "out_of_window"
    level = "query"
    requires = "date slots window_start and window_end"

    def applies(self, template):
        slots = template.spec.slots
        return super().applies(template) and all(s in slots and slots[s].type == "date" for s in WINDOW_SLOTS)

    def make(self, con, task, template, rng):
        typed = typed_slots(template, {s: task.slots[s] for s in WINDOW_SLOTS})
        start, end = typed["window_start"], typed["window_end"]
        length = (end - start).days + 1
        first = 1 if rng.integers(2) else -1
        for step in NEAR_SHIFTS + FAR_SHIFTS:
            for direction in (first, -first):
                shift = dt.timedelta(days=direction * step * length)
                if not dt.date.min + abs(shift) < start < dt.date.max - abs(shift):
                    continue
                changed = {"window_start": (start + shift).isoformat(), "window_end": (end + shift).isoformat()}
                if gold_finds_nothing(con, template, task, changed):
                    return swapped_twin(template, task, changed, _inspect(task))
        raise Rejected("no_empty_window")


def _inspect(task) -> dict:
    """The evidence table, filtered on the patient for a patient question (the whole table for a population one)."""
    table = task.evidence[0]["table_name"] if task.evidence else "admissions"
    return {"table": table, "filter": {"subject_id": task.slots["subject_id"]} if "subject_id" in task.slots else {}}
