"""displaced_time (record level): an evidence row's time moves outside its encounter's window.

The row keeps its hadm_id / stay_id but its time now lies 2-12 h (1-3 days, for a date) before the admission's
admittime (the ICU stay's intime, for a stay question) beyond the lead by which rows of its table routinely
precede their encounter (`ROUTINE_LEAD_HOURS`, 24 h), so it is also outside any first-24-h window. The offset is
drawn at the column's own granularity (prescriptions on the hour, eMAR and labs to the minute) and the target is
not a round number of hours from the admission. Store and schedule times keep their distance to the moved time; a
duration's other end stays put when the question measures the duration (its length changes), else it moves too.
Sibling rows keeping the time (siblings.yaml: a lab's specimen, the pharmacy row and provider order of a
prescription) move by the same shift; a candidate whose moved sibling would end before it starts is rejected
(`sibling_keeps_the_time`). ICU stays are not moved: the transfers and the admission fix their times. Nor is a row
of a table, or of a patient, whose rows already lie outside their encounters (it would read as the record's habit:
`table_times_rows_outside_encounters`, `record_times_rows_outside_encounters`).
Patient scope: abstain (guard: an evidence row's time lies outside its encounter's window and lead), rejected
when the question is still answered the same without the moved row, or when a first-time question has another
qualifying row. Population scope: repair by answering over the rows inside their encounter's window and lead.
Either scope also accepts the clean answer: other records may place the moved event at its true time (blind audit
20: a dialysis date read off the catheter placed, the dialysis ordered and the heparin lock given that day); a
patient question whose window is narrower than the encounter also accepts the answer with the moved row charted at
the encounter's end (outside the first 24 h), so a careless reading that drops it is rejected as defensible.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from functools import cache
from importlib import resources

import sqlglot
import yaml

from pipeline.db import scalar, source_fact
from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.encounters import (
    lead_of,
    outside_mask,
    outside_sql,
    parent_encounter,
    with_tables,
)
from pipeline.noise.evidence import evidence_table, rows_by_key
from pipeline.noise.exclusion import excluding_sql
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.id_order import in_id_order
from pipeline.noise.overlay import overlay
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.rules import time_step
from pipeline.noise.siblings import ends_before_start, sibling_patch, witnessed
from pipeline.source.schema import load_schema
from pipeline.templates.answers import AnswerValue, canonical_answer, is_empty
from pipeline.templates.instantiate import typed_slots
from pipeline.templates.programs import load_python_program, run_sql
from pipeline.templates.spec import AnswerType

MAX_DISPLACED = 3  # population scope: how many evidence rows move
HOUR, SECOND = dt.timedelta(hours=1), dt.timedelta(seconds=1)


@cache
def timed_tables() -> dict[str, dict]:
    """{table: {time, along, end}} from displaced_time.yaml."""
    return yaml.safe_load(resources.files(__package__).joinpath("displaced_time.yaml").read_text())


# table -> its time columns, the one compared with the window first (the cautious agent's checks read it)
TIME_COLUMNS = {
    t: [s["time"], *s.get("along", []), *([s["end"]] if s.get("end") else [])] for t, s in timed_tables().items()
}


@register
class DisplacedTime(NoiseSubtype):
    name = "displaced_time"
    level = "record"
    version = 14  # 14: the holes moved rows leave closed gap by gap, never onto another row's id
    # 13: a moved lab or microbiology row takes the id its new time gives it among its patient's
    # (id_order.py: blind audit 38 found a displaced lab's ids out of time order)
    # 12: ICU procedure events move (displaced_time.yaml `procedureevents`: none lies outside its stay
    # by the routine lead on the demo), so diagnosis_procedure has displaced_time pairs; no shift is a whole number
    # of hours on a finer grid (the tell test caught a -46 h move of a synthetic procedure)
    # 11: not where the table or the patient's record already dates rows outside their encounters
    # (blind audit 32: a procedure 4 days before admission read as the record's habit, untouched procedures lying
    # weeks after discharge); a moved stop time moves the provider order that discontinued it (siblings.yaml)
    # 10: the answer with the moved rows at their encounter's end moves the order's other rows too
    # (blind audit 30: a Bag base row left inside the first day while its Magnesium Sulfate was moved out)
    # 9: a narrower window than the encounter also accepts the answer with the moved row outside it
    # 8: not ICU stays (the transfers and the admission fix their times); the clean answer is accepted
    # 7: a moved ICU stay's neighbouring transfers move with it (the one before ends, the one after
    # starts, at the stay's ends: blind audit 16)
    # 6: not where another table may record the same event (an ICU procedure for a billed one)
    # 5: a moved order start moves its pharmacy entry/verification times and its provider order too
    # 3: one end of a measured duration, 24 h lead on every table, unround offsets, siblings, qualifiers;
    # 4: written-out durations (icustays.los) follow the moved ends
    requires = "evidence rows of a timed event table (displaced_time.yaml), not the encounter row itself"

    def applies(self, template):
        """Listed, and the evidence is timed rows of an encounter (not the admission row itself)."""
        return super().applies(template) and bool(template.evidence_tables & set(TIME_COLUMNS))

    def make(self, con, task, template, rng):
        table, key_columns, keys = evidence_table(con, task)
        enc = parent_encounter(template, table)
        if table not in TIME_COLUMNS:
            raise Rejected("evidence_has_no_event_time")
        time, patient, lead = timed_tables()[table]["time"], template.spec.scope.value == "patient", lead_of(table)
        inside = _rows_inside(con, enc, rows_by_key(con, table, keys), time)
        count = 1 if patient else min(MAX_DISPLACED, max(1, len(inside) // 2))
        chosen = [inside[i] for i in sorted(rng.choice(len(inside), count, replace=False))]
        habit = _outside_by_habit(con, table, enc, time, lead, {row["subject_id"] for row, _, _ in chosen})
        if habit:
            raise Rejected(habit)  # a moved row would read as the record's habit, not as an error
        moving, step = moved_columns(table, task.gold_sql), granularity(con, table, time)
        moved = [_displace(row, moving, start, lead, step, rng) for row, start, _ in chosen]
        before = [r for r, _, _ in chosen]
        if witnessed(con, table, before):
            raise Rejected("witnessed_elsewhere")
        patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=_keys(before, key_columns), add=moved)})
        patch = in_id_order(con, sibling_patch(con, table, before, moved, patch))  # ids follow the new times
        moved = patch.tables[table].add[: len(moved)]
        if ends_before_start(patch, table):
            raise Rejected("sibling_keeps_the_time")
        as_date = not isinstance(moved[0][time], dt.datetime)
        outside = outside_sql(enc, "e" if patient else table, time, as_date, lead)
        gold, inspect = load_python_program(template), {"table": table, "filter": task.slots}
        if not patient:
            return NoisyTwin(
                patch,
                "repair",
                None,
                excluding_sql(task.gold_sql, table, outside),
                _excluding_outside(gold, table, enc, time, lead),
                inspect,
                accepts_clean=True,
            )
        _reject_if_still_answered(con, task, template, table, _keys(before, key_columns))
        later = _answer_if_charted_at_end(con, task, template, table, key_columns, chosen, moving)
        new_keys = _keys(moved, key_columns)  # the guard reads the moved rows (their key may hold the time)

        def reference(tables):
            return guarded_python(
                template, gold, table, new_keys, lambda ev: bool(outside_mask(ev, tables, enc, time, lead).any())
            )

        return NoisyTwin(
            patch,
            "abstain",
            AnswerValue(value=None),
            guarded_sql(task.gold_sql, table, new_keys, f"EXISTS (SELECT 1 FROM evidence e WHERE {outside})"),
            with_tables(reference),
            inspect,
            accepts_clean=True,
            also_accepted=(later,) if later is not None else (),
        )


HABIT_RATE = 1 / 1000  # a table whose rows lie outside their encounters more often dates them so by habit


def _outside_by_habit(con, table: str, enc, time: str, lead: int, subjects: set) -> str | None:
    """Why a row moved outside its encounter would read as the record's habit rather than an error, or None: the
    table's own rows lie outside their encounter's window and lead more than once in a thousand
    (`table_times_rows_outside_encounters`; demo procedures_icd: 4 of 722), or some of these patients' rows do
    (`record_times_rows_outside_encounters`). Blind audit 32 reported a procedure moved 4 days before its admission
    as recorded, since untouched procedures lie weeks after discharge."""
    as_date = not load_schema()[table].column(time).ddl_type.startswith("TIMESTAMP")
    outside = outside_sql(enc, "t", time, as_date, lead)

    def table_habit(source: str) -> bool:  # a fact of the source tables: one scan per process, not per candidate
        encounter = dataclasses.replace(enc, table=f"{source}{enc.table}")
        anywhere_outside = outside_sql(encounter, "t", time, as_date, lead)
        sql = f"SELECT count(*) FILTER (WHERE {anywhere_outside}), count(*) FROM {source}{table} t"
        ((anywhere, rows),) = con.execute(sql).fetchall()
        return anywhere > rows * HABIT_RATE

    if source_fact(con, ("outside_by_habit", table, enc.table, time, lead), table_habit):
        return "table_times_rows_outside_encounters"
    listed = ", ".join("?" for _ in subjects)
    sql = f"SELECT count(*) FROM {table} t WHERE t.subject_id IN ({listed}) AND {outside}"
    return "record_times_rows_outside_encounters" if scalar(con, sql, sorted(subjects)) else None


def moved_columns(table: str, gold_sql: str) -> list[str]:
    """The time columns that move: the main time and those kept at a distance to it; a duration's other end
    too, unless the question measures the duration (its gold SQL reads both ends)."""
    spec = timed_tables()[table]
    columns, end = [spec["time"], *spec.get("along", [])], spec.get("end")
    measures = end and all(re.search(rf"\b{c}\b", gold_sql) for c in (spec["time"], end))
    return columns + ([end] if end and not measures else [])


def granularity(con, table: str, column: str) -> dt.timedelta | None:
    """The unit real values of the column are recorded in (`time_step`: an hour, a minute or a second); None for
    a date column."""
    if not load_schema()[table].column(column).ddl_type.startswith("TIMESTAMP"):
        return None
    return dt.timedelta(seconds=time_step(con, table, column))


def _keys(rows: list[dict], columns: list[str]) -> list[dict]:
    return list({tuple(row[c] for c in columns): {c: row[c] for c in columns} for row in rows}.values())


def _rows_inside(con, enc, rows, time) -> list[tuple[dict, object, object]]:
    """(row, its encounter's start, its end) for the rows whose time lies inside their encounter's window."""
    ids = sorted({row[enc.key] for row in rows if row[enc.key] is not None})
    sql = (
        f"SELECT {enc.key}, {enc.start}, {enc.end} FROM {enc.table} WHERE {enc.key} IN ({', '.join('?' for _ in ids)})"
    )
    found = (
        {k: (s, e) for k, s, e in con.execute(sql, ids).fetchall() if s is not None and e is not None} if ids else {}
    )
    inside = [
        (row, *found[row[enc.key]])
        for row in rows
        if row[enc.key] in found and row[time] is not None and _inside(row[time], *found[row[enc.key]])
    ]
    if not inside:
        raise Rejected("evidence_not_inside_window")
    return inside


def _inside(value, start, end) -> bool:
    """`value` lies in [start, end]; a date is compared with the window's days, as the SQL rule does."""
    if not isinstance(value, dt.datetime):
        start, end = start.date(), end.date()
    return start <= value <= end


def _displace(row: dict, columns: list[str], start, lead: int, step: dt.timedelta | None, rng) -> dict:
    """The row with its moving columns shifted so that the main one lies 2-12 h (1-3 days) before `start` plus
    the lead, at the column's granularity `step` (an offset from `start` that is no round number of hours)."""
    main = row[columns[0]]
    if isinstance(main, dt.datetime):
        grid = step or SECOND  # a timestamp column always has a granularity
        units = int(rng.integers(2 * HOUR // grid, 12 * HOUR // grid))
        target = start - dt.timedelta(hours=lead) - units * grid - grid * float(rng.random())
        target -= (target - dt.datetime.min) % grid  # on the column's own grid
        if grid < HOUR and (target - main) % HOUR == dt.timedelta(0):
            target -= grid  # nor a whole number of hours from where it was (1 draw in 60 on a minute grid)
        shift = target - main
    else:
        shift = dt.timedelta(days=(start.date() - main).days - lead // 24 - int(rng.integers(1, 4)))
    return {**row, **{c: row[c] + shift for c in columns if row[c] is not None}}


def _reject_if_still_answered(con, task, template, table: str, hidden: list[dict]) -> None:
    """A careful analyst who sets the moved rows aside must not still have an answer: the clean one (another
    record qualifies: a dose at +20 h still makes "given in the first 24 h" true) or, for a first-time question
    (the gold picks one row), any."""
    patch = Patch(tables={table: TablePatch(key_columns=list(hidden[0]), hide=hidden)})
    with overlay(con, patch, ordered=False):
        frame = run_sql(con, template.gold_sql, typed_slots(template, task.slots))
    left = canonical_answer(frame, template.spec.answer) if frame.height else AnswerValue(value=None)
    first_time = sqlglot.parse_one(task.gold_sql, dialect="duckdb").args.get("limit") is not None
    if not is_empty(left) and (first_time or left == task.answer):
        raise Rejected("other_record_still_qualifies")


def _answer_if_charted_at_end(con, task, template, table, key_columns, chosen, moving) -> AnswerValue | None:
    """The answer were the moved rows charted at their encounter's end. Their true time lies somewhere in the
    encounter, so where the question's window is narrower than it (the first 24 h of a longer ICU stay) the answer
    without them is as defensible as the clean one (blind audit 22: a 20 mL urine row whose nurse also charted a
    night shift days later); a list question may then be answered by none ([]: an IM vaccine the only IM drug). None
    where the answer reports a time (the end would be an arbitrary one) or where there is no answer."""
    answer = template.spec.answer
    if answer.type == AnswerType.datetime or answer.asked_records:
        return None
    at_end = [_moved_to(row, moving, end) for row, _, end in chosen]
    before = [row for row, _, _ in chosen]
    patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=_keys(before, key_columns), add=at_end)})
    # the order's other rows move with it (blind audit 30: a Bag base row left at its time beside its moved drug)
    patch = sibling_patch(con, table, before, at_end, patch)
    with overlay(con, patch, ordered=False):
        frame = run_sql(con, template.gold_sql, typed_slots(template, task.slots))
    none = AnswerValue(value=[] if answer.type == AnswerType.list else None)
    found = canonical_answer(frame, answer) if frame.height else none
    return None if found.value is None or found == task.answer else found


def _moved_to(row: dict, columns: list[str], end) -> dict:
    """The row with its main time at `end` (its day, for a date) and the columns along keeping their distance."""
    main = row[columns[0]]
    shift = end - main if isinstance(main, dt.datetime) else dt.timedelta(days=(end.date() - main).days)
    return {**row, **{c: row[c] + shift for c in columns if row[c] is not None}}


def _excluding_outside(gold, table, enc, time, lead):
    """Python repair reference: the gold program over the rows of `table` inside their encounter's window."""

    def reference(tables, slots):
        frame = tables[table].collect()
        valid = frame.filter(~outside_mask(frame, tables, enc, time, lead))
        return gold(tables.replaced({table: valid}), slots)

    return reference
