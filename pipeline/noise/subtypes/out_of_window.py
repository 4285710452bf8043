"""out_of_window (query level): the question's time window moves to one that holds no record; abstain.

Templates with a `window_start` / `window_end` pair of date slots qualify. The window keeps its length and
moves by whole lengths, nearest first, earlier or later as the seed says, until the gold program finds nothing
there: the record the clean question asked about stays just outside, where a reader who takes the nearest
measurement finds it (the trap). Where records are dense (a population question over a large database), the
moves then double, up to centuries, until the window leaves the period the record covers.

Zero is an answer: a count or yes/no question over an empty window inside the covered span (`coverage` in
out_of_window.yaml: the patient's encounters, or the database's, as the scope needs) is a real 0 / no. For those
the window must lie wholly outside that span, and both reference programs abstain only there; a value question
("the last value in the window") has nothing to report over any empty window and may abstain inside it.
"""

from __future__ import annotations

import datetime as dt
from functools import cache
from importlib import resources

import polars as pl
import yaml

from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.slot_swap import empty_answer, gold_finds_nothing, swapped_twin
from pipeline.templates.instantiate import typed_slots
from pipeline.templates.render import sql_literal
from pipeline.templates.spec import AnswerType

WINDOW_SLOTS = ("window_start", "window_end")
NEAR_SHIFTS = tuple(range(1, 13))  # window lengths tried on each side first (each costs one gold query)
FAR_SHIFTS = tuple(2**k for k in range(4, 15))  # then 16, 32, ... 16,384 lengths away
ZERO_IS_AN_ANSWER = (AnswerType.count, AnswerType.boolean)


@cache
def coverage_spans() -> list[dict[str, str]]:
    """[{table, start, end}] from out_of_window.yaml."""
    return yaml.safe_load(resources.files(__package__).joinpath("out_of_window.yaml").read_text())["coverage"]


@register
class OutOfWindow(NoiseSubtype):
    name = "out_of_window"
    level = "query"
    version = 3  # 2: a count / yes-no window moves outside what the record covers (an empty covered window is 0)
    # 3: what the record covers is every dated table's span (labs, cultures, omr, orders, death), not encounters only
    requires = "date slots window_start and window_end"

    def applies(self, template):
        slots = template.spec.slots
        return super().applies(template) and all(s in slots and slots[s].type == "date" for s in WINDOW_SLOTS)

    def make(self, con, task, template, rng):
        typed = typed_slots(template, {s: task.slots[s] for s in WINDOW_SLOTS})
        start, end = typed["window_start"], typed["window_end"]
        length, first = (end - start).days + 1, 1 if rng.integers(2) else -1
        if template.spec.answer.type in ZERO_IS_AN_ANSWER:
            return _outside_coverage(task, template, covered_span(con, task.slots.get("subject_id")), length, first)
        for step in NEAR_SHIFTS + FAR_SHIFTS:
            for direction in (first, -first):
                changed = _moved(start, end, direction * step * length)
                if changed and gold_finds_nothing(con, template, task, changed):
                    return swapped_twin(template, task, changed, _inspect(task))
        raise Rejected("no_empty_window")


def _moved(start: dt.date, end: dt.date, days: int) -> dict | None:
    """The window slots moved by `days` (None when a date would leave the calendar)."""
    shift = dt.timedelta(days=days)
    if not dt.date.min + abs(shift) < start < dt.date.max - abs(shift):
        return None
    return {"window_start": (start + shift).isoformat(), "window_end": (end + shift).isoformat()}


def _outside_coverage(task, template, span, length: int, first: int):
    """The window moved by the fewest whole lengths that put it wholly before (or after) the covered span."""
    start, end = (dt.date.fromisoformat(str(task.slots[s])) for s in WINDOW_SLOTS)
    for direction in (first, -first):
        gap = (span[1] - start).days + 1 if direction > 0 else (end - span[0]).days + 1
        changed = _moved(start, end, direction * max(1, -(-gap // length)) * length)
        if changed and not _overlaps(span, *(dt.date.fromisoformat(changed[s]) for s in WINDOW_SLOTS)):
            return _twin(template, task, changed)
    raise Rejected("window_inside_coverage")


def covered_span(con, subject_id=None) -> tuple[dt.date, dt.date]:
    """(first, last) day the record covers: the patient's rows, or every row (subject_id None)."""
    ((lo, hi),) = con.execute(
        f"SELECT CAST(min(lo) AS DATE), CAST(max(hi) AS DATE) FROM ({_spans_sql(subject_id)})"
    ).fetchall()
    if lo is None:
        raise Rejected("record_covers_no_period")
    return lo, hi


def _overlaps(span: tuple[dt.date, dt.date], start: dt.date, end: dt.date) -> bool:
    return start <= span[1] and end >= span[0]


def _twin(template, task, changed: dict):
    """The abstain twin of a count / yes-no question: both references abstain only outside the covered span."""
    twin = swapped_twin(template, task, changed, _inspect(task))
    subject_id, gold = task.slots.get("subject_id"), twin.reference_python
    start, end = changed["window_start"], changed["window_end"]
    twin.reference_sql = (
        f"SELECT g.* FROM (\n{twin.reference_sql}\n) g\nWHERE {_span_overlap_sql(start, end, subject_id)}"
    )

    def reference_python(tables, slots):
        return (
            gold(tables, slots)
            if _overlaps(_frame_span(tables), slots["window_start"], slots["window_end"])
            else empty_answer(template)
        )

    twin.reference_python = reference_python
    return twin


def _span_overlap_sql(start: str, end: str, subject_id) -> str:
    """SQL: the window [start, end] meets the covered span (the union of every table's [min, max])."""
    return (
        f"(SELECT CAST(min(lo) AS DATE) <= {sql_literal(end)}::DATE AND CAST(max(hi) AS DATE) >= "
        f"{sql_literal(start)}::DATE FROM ({_spans_sql(subject_id)}))"
    )


def _spans_sql(subject_id) -> str:
    """SQL rows (lo, hi): each coverage table's first start and last end (the patient's rows, or all)."""
    where = "" if subject_id is None else f" WHERE subject_id = {int(subject_id)}"
    return " UNION ALL ".join(
        f"SELECT min({c['start']}) AS lo, max({c['end']}) AS hi FROM {c['table']}{where}" for c in coverage_spans()
    )


def _frame_span(tables) -> tuple[dt.date, dt.date]:
    """The covered span computed in polars over the (scoped) tables."""
    spans = [
        tables[c["table"]]
        .lazy()
        .select(lo=pl.col(c["start"]).min().cast(pl.Date), hi=pl.col(c["end"]).max().cast(pl.Date))
        .collect()
        for c in coverage_spans()
    ]
    both = pl.concat(spans)
    lo, hi = both["lo"].min(), both["hi"].max()
    return (lo, hi) if lo is not None else (dt.date.max, dt.date.min)


def _inspect(task) -> dict:
    """The evidence table, filtered on the patient for a patient question (the whole table for a population one)."""
    table = task.evidence[0]["table_name"] if task.evidence else "admissions"
    return {"table": table, "filter": {"subject_id": task.slots["subject_id"]} if "subject_id" in task.slots else {}}
