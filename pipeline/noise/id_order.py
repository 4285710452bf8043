"""Ids that follow time: an added or moved row of a table numbered in time order takes the id its time gives it.

MIMIC-IV numbers a patient's labs and microbiology results consecutively in the order they were charted (demo:
107,627 of 107,627 successive `labevent_id`s of one patient never go back in time; 2,782 of 2,802
`microevent_id`s, by chart time, else chart date). A copy with the patient's highest id, or a lab moved to
another day that keeps its id, is then found by sorting on the id (blind audits 38-40). Here each added row is
placed among the patient's rows by its time, and takes an id between its neighbours': a free id there, else the
shortest run of rows on one side moves by one toward the nearest free id (the patch renumbers them). A copy sits
beside the row it copies (just after or just before it), which keeps its own id: guards read it by that key.
"""

from __future__ import annotations

import bisect
import datetime as dt
from dataclasses import dataclass
from typing import Any

from pipeline.db import scalar
from pipeline.noise.base import Rejected
from pipeline.noise.patch import Patch, TablePatch


@dataclass(frozen=True)
class IdOrder:
    column: str  # the id column
    times: tuple[str, ...]  # the row's time: the first of these that is not NULL
    natural: tuple[str, ...] = ()  # columns that identify a row without its id


ID_ORDER = {
    "labevents": IdOrder("labevent_id", ("charttime",), ("specimen_id", "itemid")),  # demo: 107,727 of 107,727
    # a result is its specimen's test, organism, isolate and antibiotic (NULL where none grew: matched null-safe)
    "microbiologyevents": IdOrder(
        "microevent_id",
        ("charttime", "chartdate"),
        ("micro_specimen_id", "test_itemid", "org_itemid", "isolate_num", "ab_itemid"),  # demo: 2,899 of 2,899
    ),
}


@dataclass
class _Slot:
    id: int
    time: Any
    source: int | None  # the source id of a source row (renumbered when `id` moves off it)
    row: dict | None = None  # an added row (its id is written back)
    pinned: bool = False  # a row some added row copies: it keeps its id


def in_id_order(con, patch: Patch, hides_too: bool = False, at_most: int | None = None) -> Patch:
    """The patch with every added row of an `ID_ORDER` table numbered where its time places it among its
    patient's rows, and the source rows that make room for it renumbered (`TablePatch.renumber`). With
    `hides_too`, hidden rows of a table with a natural key leave no hole either (the block closes over them; the
    caller then finds rows by that key, since their ids move). More than `at_most` renumbered rows in a table is
    Rejected as `too_many_ids_to_renumber` as soon as the count passes it."""
    tables = dict(patch.tables)
    for table, order in ID_ORDER.items():
        table_patch = tables.get(table)
        closes = hides_too and bool(order.natural) and table_patch is not None and bool(table_patch.hide)
        if table_patch is not None and (table_patch.add or closes):
            tables[table] = _ordered(con, table, order, table_patch, at_most)
    return patch.model_copy(update={"tables": tables})


def _time(row: dict, order: IdOrder) -> Any:
    return _as_datetime(next((row[c] for c in order.times if row.get(c) is not None), None))


def _as_datetime(value: Any) -> Any:
    """A chart time or date as a datetime (ISO text from a patches file too; a date at its midnight)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return dt.datetime.combine(value, dt.time()) if type(value) is dt.date else value


def _ordered(con, table: str, order: IdOrder, patch: TablePatch, at_most: int | None) -> TablePatch:
    column = order.column
    if patch.key_columns != [column]:
        raise ValueError(f"{table}: a patch renumbering {column} must be keyed by it, not {patch.key_columns}")
    hidden = {key[column] for key in patch.hide}
    added = [dict(row) for row in patch.add]
    free = _FreeIds(con, table, column, hidden)
    renumber: dict[int, int] = {}
    subjects = {row["subject_id"] for row in added}
    if hidden:  # a hidden row's patient: its block closes over the hole (a moved row's is an added row's too)
        listed = ", ".join(str(int(i)) for i in sorted(hidden))
        subjects |= {
            s
            for (s,) in con.execute(f"SELECT DISTINCT subject_id FROM {table} WHERE {column} IN ({listed})").fetchall()
        }
    time = f"coalesce({', '.join(order.times)})"
    for subject in sorted(subjects):
        found = con.execute(
            f"SELECT {column}, {time} FROM {table} WHERE subject_id = ? ORDER BY {column}", [subject]
        ).fetchall()
        slots = [_Slot(i, _as_datetime(t), i) for i, t in found if i not in hidden]
        mine = [row for row in added if row["subject_id"] == subject]
        copied = {row[column] for row in mine} - hidden
        for slot in slots:
            slot.pinned = slot.id in copied
        for row in sorted(mine, key=lambda r: (r[column] in copied, _time(r, order) or dt.datetime.min, r[column])):
            _place(slots, row, order, free)
        _close_holes(slots, hidden - free.given, _foreign_ids(con, table, column, subject, slots))
        for slot in slots:
            if slot.row is not None:
                slot.row[column] = slot.id
            elif slot.source is not None and slot.id != slot.source:
                renumber[slot.source] = slot.id
        if at_most is not None and len(renumber) > at_most:
            raise Rejected("too_many_ids_to_renumber")  # an overlay of tens of thousands of renumbered rows
    moves = {column: dict(sorted(renumber.items()))} if renumber else {}
    return patch.model_copy(update={"add": added, "renumber": moves})


class _FreeIds:
    """Whether an id is free in the overlay: no source row holds it but one the patch hides, and the patch has
    not given it out (to an added row, or to a row that moved to make room)."""

    def __init__(self, con, table: str, column: str, hidden: set[int]):
        self.con, self.table, self.column, self.hidden = con, table, column, hidden
        self.given: set[int] = set()

    def __call__(self, value: int) -> bool:
        if value < 1 or value in self.given:
            return False
        held = scalar(self.con, f"SELECT count(*) FROM {self.table} WHERE {self.column} = ?", [value])
        return not held or value in self.hidden


def _place(slots: list[_Slot], row: dict, order: IdOrder, free: _FreeIds) -> None:
    """Insert the added row among the patient's `slots` (strictly increasing ids) at the cheapest position its time
    allows."""
    column, at = order.column, _time(row, order)
    original = next((k for k, s in enumerate(slots) if s.row is None and s.pinned and s.id == row[column]), None)
    if original is not None:  # a copy: just after or just before its original
        positions = [original + 1, original]
    else:
        before = [k for k, s in enumerate(slots) if s.time is not None and at is not None and s.time <= at]
        positions = [before[-1] + 1 if before else 0]
    options = [option for k in positions if (option := _room(slots, k, free)) is not None]
    if not options:
        raise Rejected("no_room_for_id_in_time_order")
    _, shift, k, run, new_id = min(options, key=lambda o: o[:3])
    for slot in run:
        slot.id += shift
        free.given.add(slot.id)
    slots.insert(k, _Slot(new_id, at, None, row))
    free.given.add(new_id)


def _room(slots: list[_Slot], k: int, free: _FreeIds) -> tuple | None:
    """(cost, shift, position, run, id) for the cheapest way to insert a row before `slots[k]`: a free id between
    the neighbours (cost 0), else the run from k up (or from k-1 down) to the nearest free id, moved by one."""
    low = slots[k - 1].id if k > 0 else None
    high = slots[k].id if k < len(slots) else None
    if low is not None and (high is None or low + 1 < high) and free(low + 1):
        return 0, 0, k, [], low + 1
    if low is None and high is not None and free(high - 1):
        return 0, 0, k, [], high - 1
    options = []
    for shift, run, new_id in ((1, slots[k:], high), (-1, slots[:k][::-1], low)):
        for n, slot in enumerate(run):
            if slot.pinned:
                break
            following = run[n + 1].id if n + 1 < len(run) else None
            if following == slot.id + shift:
                continue  # the next id is the run's own next row: it moves too
            if free(slot.id + shift):
                options.append((n + 1, shift, k, run[: n + 1], new_id))
            break  # another patient's id (or one given out) stops the run
    return min(options, key=lambda o: o[:3]) if options else None


def _foreign_ids(con, table: str, column: str, subject: int, slots: list[_Slot]) -> frozenset[int]:
    """Ids other patients' rows hold within this patient's block (a side that closes a hole must not land on one)."""
    if not slots:
        return frozenset()
    found = con.execute(
        f"SELECT {column} FROM {table} WHERE {column} BETWEEN ? AND ? AND subject_id IS DISTINCT FROM ?",
        [min(s.id for s in slots), max(s.id for s in slots), subject],
    ).fetchall()
    return frozenset(i for (i,) in found)


def _close_holes(slots: list[_Slot], holes: set[int], foreign: frozenset[int] = frozenset()) -> None:
    """Ids moved rows left inside their patient's block (a hole real blocks do not have: demo labs, at most 6
    between two of one patient's rows) closed: for each gap between two neighbouring rows that holds holes, every
    row on the shorter side moves by the number of holes in it, so the block ends there instead (its other gaps
    are kept as they are). Moving one side keeps every other gap's width, so the holes per gap are counted once;
    a side with a pinned row (a copied original), or one that would land on another patient's id, stays."""
    ordered = sorted(holes)
    widths = [
        bisect.bisect_left(ordered, slots[k].id) - bisect.bisect_right(ordered, slots[k - 1].id)
        for k in range(1, len(slots))
    ]
    for k, width in enumerate(widths, start=1):
        if not width:
            continue
        sides = [(slots[k:], -width), (slots[:k], width)]
        valid = [
            (len(run), shift, run)
            for run, shift in sides
            if not any(slot.pinned or slot.id + shift in foreign for slot in run)
        ]
        if valid:
            _, shift, run = min(valid, key=lambda v: v[:2])
            for slot in run:
                slot.id += shift
