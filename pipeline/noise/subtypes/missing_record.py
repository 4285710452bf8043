"""missing_record (record level): every row the question could rest on is hidden; the answer is unsupported.

A measurement's gap runs a random 2-12 h past the question's window on each side (a record loses a stretch of
charting; it does not stop and restart where a question's window does).

A patient question's rows that another table also records (siblings.yaml `witnesses`: an ICU patient's lab in
chartevents under a Labs item) are not hidden (`witnessed_elsewhere`); nor are encounters whose every column the
question reads another table keeps (siblings.yaml `records` with `keeps`: an ICU stay's times and unit are its
transfer's; `recorded_elsewhere`)."""

from __future__ import annotations

import datetime as dt

import polars as pl

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.encounters import columns_read
from pipeline.noise.evidence import candidate_keys, evidence_table, rows_by_key
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.id_order import ID_ORDER, in_id_order
from pipeline.noise.measurements import measurement_tables
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.siblings import all_matched, record_rules, witnessed
from pipeline.noise.slot_swap import concept_slots
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program
from pipeline.templates.spec import AnswerType

MAX_HIDDEN = 5_000  # a population question over more rows than this is not a missing-record item
MAX_RENUMBERED = 5_000  # rows whose ids move to close the holes hidden labs leave (demo: 104 to 58,001 a pair)
# Zero is an answer: with the rows a count, a yes/no or a list rests on hidden, 0, "no" and "none" are what the
# record says (no abnormal potassium, never in the MICU, no procedure coded), so such a question abstains only when
# it asks about one encounter's rows of a table that every MIMIC-IV hospital admission has (billed diagnoses,
# services, transfers) and names no concept: then zero rows cannot be true.
ALWAYS_RECORDED = frozenset({"diagnoses_icd", "services", "transfers"})
ANSWERED_BY_ABSENCE = (AnswerType.count, AnswerType.boolean, AnswerType.list)


@register
class MissingRecord(NoiseSubtype):
    name = "missing_record"
    level = "record"
    version = 8  # 8: each gap of hidden rows closed once by its own count (a block with two gaps kept a hole or gave
    # an id twice: each of the 7 demo candidates whose closing changed had taken an id already held)
    # 7: hidden labs leave no hole in the patient's labevent_ids (`_without_holes`); a measurement's
    # gap runs 2-12 h past the question's window on each side (`_beyond_the_window`:
    # blind audit 38 saw a patient's hourly rows vanish exactly inside the asked window)
    # 6: nor prescriptions whose pharmacy rows keep what the question reads (siblings.yaml `records`:
    # blind audit 35 read a Clopidogrel route share off the pharmacy rows of its 23 hidden prescriptions)
    # 5: not encounters another table keeps whole for the question (an ICU stay's transfer)
    # 2: rejected when the noisy data still answers the clean question; 3: zero, no, none are answers
    # 4: not where another table charts the same results (siblings.yaml witnesses: an ICU lab in chartevents)
    noisy_data_unanswerable = True

    requires = (
        "a value answer, or a count / yes-no / list over one encounter's rows of a table every admission "
        "has (diagnoses_icd, services, transfers) with no concept slot: zero, no and none are answers"
    )

    def applies(self, template):
        if template.spec.answer.type not in ANSWERED_BY_ABSENCE:
            return super().applies(template)
        return (
            super().applies(template)
            and template.spec.scope.value == "patient"
            and not concept_slots(template)
            and template.evidence_tables <= ALWAYS_RECORDED
        )

    def make(self, con, task, template, rng):
        table, _, _ = evidence_table(con, task)
        hidden = candidate_keys(con, task, template, at_most=MAX_HIDDEN)
        if not hidden or len(hidden) > MAX_HIDDEN:
            raise Rejected("too_many_candidate_rows" if hidden else "no_candidate_rows")
        key_columns = list(hidden[0])
        rows = rows_by_key(con, table, hidden)
        if template.spec.scope.value == "patient" and witnessed(con, table, rows):
            raise Rejected("witnessed_elsewhere")  # another table charts the same results (an ICU lab in chartevents)
        if _recorded_elsewhere(con, table, rows, template):
            raise Rejected("recorded_elsewhere")  # blind audit 30 rebuilt 23 hidden ICU stays from their transfers
        beyond = _beyond_the_window(con, table, rows, key_columns, rng)  # the gap does not end at the question
        patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=hidden + beyond)})
        patch, guard_keys = _without_holes(con, table, patch, rows, hidden)
        gold = load_python_program(template)
        return NoisyTwin(
            patch=patch,
            contract="abstain",
            expected=AnswerValue(value=None, unit=task.answer.unit if template.spec.answer.unit else None),
            reference_sql=guarded_sql(task.gold_sql, table, guard_keys, "(SELECT count(*) FROM evidence) = 0"),
            reference_python=guarded_python(template, gold, table, guard_keys, lambda rows: rows.height == 0),
            inspect={"table": table, "filter": task.slots},
        )


def _without_holes(con, table: str, patch: Patch, rows: list[dict], hidden: list[dict]) -> tuple[Patch, list[dict]]:
    """For a table numbered in time order with a natural key (labs): the patch with the patient's block closed over
    the hidden rows (blind audit 41 found a labevent_id hole before each of 143 blood-gas panels whose rows were
    hidden), and the guard's keys by that natural key, since other rows now hold the hidden ids. Rejected for such a
    table without one: its holes would stay."""
    order = ID_ORDER.get(table)
    if order is None:
        return patch, hidden
    if not order.natural:  # no key to find the rows by once ids move
        raise Rejected("hidden_rows_leave_id_holes")
    closed = in_id_order(con, patch, hides_too=True, at_most=MAX_RENUMBERED)
    return closed, [{c: row[c] for c in order.natural} for row in rows]


def _recorded_elsewhere(con, table: str, rows: list[dict], template) -> bool:
    """Another table records every hidden row with every column of `table` the gold SQL reads (siblings.yaml
    `records` rules with `keeps`)."""
    read = columns_read(template, table)
    for rule in record_rules(table):
        if "keeps" not in rule:  # the sibling records the encounter, not its columns (an admission's transfers)
            continue
        kept = {*rule["keeps"], *rule["match"], *rule.get("keys", [])}
        if read <= kept and all_matched(con, rule, rows):
            return True
    return False


def _beyond_the_window(con, table: str, rows: list[dict], key_columns: list[str], rng) -> list[dict]:
    """Keys of a measurement table's rows of the same patients and items charted within a random 2-12 h (to the
    minute) before the first hidden row or after the last: a record loses a stretch of charting, which does not
    start and stop where a question's window does. Other tables hide the question's rows only."""
    facts = measurement_tables().get(table)
    if facts is None or not rows:
        return []
    spans: dict[tuple, list] = {}
    for row in rows:
        if row.get(facts.time) is not None:
            spans.setdefault((row["subject_id"], row[facts.item]), []).append(row[facts.time])
    windows: list[tuple] = []  # per (patient, item), sorted: the stretch before the first hidden row, after the last
    for (subject, item), times in sorted(spans.items()):
        before, after = (dt.timedelta(minutes=int(rng.integers(120, 721))) for _ in range(2))
        first, last = min(times), max(times)
        windows.append((len(windows), subject, item, first - before, first, last, last + after))
    if not windows:
        return []
    listed, time = ", ".join(f"t.{c}" for c in key_columns), f"t.{facts.time}"
    con.register("__windows", pl.DataFrame(windows, schema=list("nsiabcd"), orient="row"))
    try:  # one scan for every window (a query per window cost 7,296 queries in 904 attempts)
        found = con.execute(
            f"SELECT {listed} FROM {table} t JOIN __windows w ON t.subject_id = w.s AND t.{facts.item} = w.i "
            f"WHERE {time} >= w.a AND {time} < w.b OR {time} > w.c AND {time} <= w.d ORDER BY w.n, {listed}"
        ).fetchall()
    finally:
        con.unregister("__windows")
    hidden = {tuple(row[c] for c in key_columns) for row in rows}
    return [dict(zip(key_columns, key, strict=True)) for key in found if key not in hidden]
