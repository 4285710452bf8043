"""displaced_time (record level): an evidence row's time moves outside its encounter's window.

The row keeps its hadm_id / stay_id but its time now lies a few hours (days, for a date) before the
admission's admittime (the ICU stay's intime, for a stay question), beyond the lead by which labs and charted
vitals routinely precede their encounter (`ROUTINE_LEAD_HOURS`), so it is also outside any first-24-h window;
every time column of the row moves by the same shift. The gold program then skips it and picks
another row, or still counts it: the naive answer shows which. Patient scope: abstain (guard: an evidence
row's time lies outside its encounter's window). Population scope: repair by answering over the rows whose
time lies inside their encounter's window.
"""

from __future__ import annotations

import datetime as dt

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.encounters import (ROUTINE_LEAD_HOURS, declared_evidence_tables, outside_mask, outside_sql,
                                       parent_encounter, with_tables)
from pipeline.noise.evidence import evidence_table, rows_by_key
from pipeline.noise.exclusion import excluding_sql
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.patch import Patch, TablePatch
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program

# table -> its time columns, the one compared with the window first; the others move along with it
TIME_COLUMNS = {
    "labevents": ["charttime"], "chartevents": ["charttime"], "outputevents": ["charttime"],
    "inputevents": ["starttime", "endtime"], "emar": ["charttime", "scheduletime"],
    "prescriptions": ["starttime", "stoptime"], "procedures_icd": ["chartdate"], "services": ["transfertime"],
    "icustays": ["intime", "outtime"],
}
MAX_DISPLACED = 3  # population scope: how many evidence rows move


@register
class DisplacedTime(NoiseSubtype):
    name = "displaced_time"
    level = "record"
    version = 2  # 2: labs and charted vitals move beyond the lead by which they routinely precede their encounter
    requires = "evidence rows of a timed event table (TIME_COLUMNS), not the encounter row itself"

    def applies(self, template):
        """Listed, and the evidence is timed rows of an encounter (not the admission row itself)."""
        return super().applies(template) and bool(declared_evidence_tables(template) & set(TIME_COLUMNS))

    def make(self, con, task, template, rng):
        table, key_columns, keys = evidence_table(task)
        enc = parent_encounter(template, table)
        if table not in TIME_COLUMNS:
            raise Rejected("evidence_has_no_event_time")
        time, patient = TIME_COLUMNS[table][0], template.spec.scope.value == "patient"
        inside = _rows_inside(con, enc, rows_by_key(con, table, keys), time)
        count = 1 if patient else min(MAX_DISPLACED, max(1, len(inside) // 2))
        chosen = [inside[i] for i in sorted(rng.choice(len(inside), count, replace=False))]
        moved = [_displace(row, table, start, rng) for row, start in chosen]
        patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=_keys([r for r, _ in chosen], key_columns), add=moved)})
        outside = outside_sql(enc, "e" if patient else table, time, as_date=not isinstance(moved[0][time], dt.datetime))
        gold, inspect = load_python_program(template), {"table": table, "filter": task.slots}
        if not patient:
            return NoisyTwin(patch, "repair", None, excluding_sql(task.gold_sql, table, outside), _excluding_outside(gold, table, enc, time), inspect)
        new_keys = _keys(moved, key_columns)  # the guard reads the moved rows (their key may hold the time)

        def reference(tables):
            return guarded_python(template, gold, table, new_keys, lambda ev: bool(outside_mask(ev, tables, enc, time).any()))

        return NoisyTwin(patch, "abstain", AnswerValue(value=None),
                         guarded_sql(task.gold_sql, table, new_keys, f"EXISTS (SELECT 1 FROM evidence e WHERE {outside})"),
                         with_tables(reference), inspect)


def _keys(rows: list[dict], columns: list[str]) -> list[dict]:
    return list({tuple(row[c] for c in columns): {c: row[c] for c in columns} for row in rows}.values())


def _rows_inside(con, enc, rows, time) -> list[tuple[dict, object]]:
    """(row, its encounter's start) for the rows whose time lies inside their encounter's window."""
    ids = sorted({row[enc.key] for row in rows if row[enc.key] is not None})
    sql = f"SELECT {enc.key}, {enc.start}, {enc.end} FROM {enc.table} WHERE {enc.key} IN ({', '.join('?' for _ in ids)})"
    found = {k: (s, e) for k, s, e in con.execute(sql, ids).fetchall() if s is not None and e is not None} if ids else {}
    inside = [(row, found[row[enc.key]][0]) for row in rows
              if row[enc.key] in found and row[time] is not None and _inside(row[time], *found[row[enc.key]])]
    if not inside:
        raise Rejected("evidence_not_inside_window")
    return inside


def _inside(value, start, end) -> bool:
    """`value` lies in [start, end]; a date is compared with the window's days, as the SQL rule does."""
    if not isinstance(value, dt.datetime):
        start, end = start.date(), end.date()
    return start <= value <= end


def _displace(row: dict, table: str, start, rng) -> dict:
    """The row with every time column shifted so that its main time lies 2-12 h (1-3 days) before `start`,
    beyond the table's routine lead."""
    columns = TIME_COLUMNS[table]
    main = row[columns[0]]
    if isinstance(main, dt.datetime):
        shift = start - dt.timedelta(hours=ROUTINE_LEAD_HOURS.get(table, 0) + int(rng.integers(2, 13))) - main
    else:
        shift = dt.timedelta(days=(start.date() - main).days - int(rng.integers(1, 4)))
    return {**row, **{c: row[c] + shift for c in columns if row[c] is not None}}


def _excluding_outside(gold, table, enc, time):
    """Python repair reference: the gold program over the rows of `table` inside their encounter's window."""

    def reference(tables, slots):
        frame = tables[table].collect()
        valid = frame.filter(~outside_mask(frame, tables, enc, time))
        return gold(tables.replaced({table: valid}), slots)

    return reference
