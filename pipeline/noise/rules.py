"""Rules kept as data for unit, placeholder and duplicate noise, and the scope-dependent twin they share.

A rule is a row predicate in SQL and in polars. Patient scope abstains when an evidence row breaks it (the
gold program guarded on the evidence); population scope repairs by answering over the rows that keep it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from typing import Any

import polars as pl
import yaml

from pipeline.db import source_fact
from pipeline.noise.base import NoisyTwin, Rejected
from pipeline.noise.cohort import Cohort, task_cohort
from pipeline.noise.evidence import evidence_table
from pipeline.noise.exclusion import excluding_python, excluding_sql
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.measurements import MeasurementTable, measurement_tables
from pipeline.noise.patch import Patch, TablePatch
from pipeline.templates.answers import AnswerValue
from pipeline.templates.instantiate import CleanTask
from pipeline.templates.programs import load_python_program

MAX_ALTERED = 25  # population scope: at most this many of the cohort's rows (one subject's) are touched


def _data(name: str) -> Any:
    return yaml.safe_load(resources.files("pipeline.noise").joinpath(name).read_text())


@cache
def unit_columns() -> dict[str, dict[str, str]]:
    """{table: {item: column, unit: column}} for tables outside measurements.yaml, from `units.yaml`."""
    return _data("units.yaml").get("unit_columns", {})


@cache
def placeholders() -> dict[str, Any]:
    """{"masks": [...], "errors": [...], "text_columns": {table: [...]}} from `placeholders.yaml`."""
    return _data("placeholders.yaml")


@cache
def duplicate_rules() -> dict[str, dict[str, Any]]:
    """{table: {group: [...], values: [...], fresh_id: column | None}} from `duplicates.yaml`."""
    return _data("duplicates.yaml")


def read_value_column(table: str | None, gold_sql: str) -> str | None:
    """The value column of a record table (`values` in duplicates.yaml) that the gold SQL reads first."""
    listed = duplicate_rules().get(table or "", {}).get("values", [])
    return next((c for c in listed if re.search(rf"\b{c}\b", gold_sql)), None)


@dataclass(frozen=True)
class Rule:
    """A row predicate: true for a row the sub-type made invalid."""

    sql: str
    expr: pl.Expr
    within: pl.Expr | None = None  # the only rows the rule can flag (evaluate `expr` on them alone)

    def flagged(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        """The rows of `frame` the rule flags."""
        scoped = frame if self.within is None else frame.filter(self.within.fill_null(False))
        return scoped.filter(self.expr.fill_null(False))


@dataclass
class Evidence:
    table: str
    key_columns: list[str]
    facts: MeasurementTable | None  # None: not a measurement table
    rows: Cohort  # one source row per key, in DuckDB
    task: CleanTask

    @cached_property
    def keys(self) -> Sequence[dict[str, Any]]:
        """The evidence keys in Python (KeyRows for a large evidence): only a patient's guard reads them."""
        return evidence_table(self.rows.con, self.task)[2]

    @property
    def measurement(self) -> MeasurementTable:
        """The measurement table's facts, for a rule that only runs on measurement evidence."""
        if self.facts is None:
            raise TypeError(f"evidence in {self.table} is not in a measurement table (measurements.yaml)")
        return self.facts


def table_evidence(con, task) -> Evidence:
    """The task's evidence rows, one source row per key."""
    table, key_columns, keys, rows = task_cohort(con, task)
    if rows.height != keys:
        raise Rejected("evidence_keys_not_unique" if rows.height > keys else "evidence_not_clean")
    return Evidence(table, key_columns, measurement_tables().get(table), rows, task)


def is_patient(template) -> bool:
    return template.spec.scope.value == "patient"


def fixes_unit(template) -> bool:
    """The question names the measurement unit (a `unit` or `*_unit` slot; a care unit is no unit): its rows are
    those in that unit, whatever the item's usual one."""
    return any(slot == "unit" or slot.endswith("_unit") for slot in template.spec.slots)


def pick(rows: Cohort, patient: bool, rng) -> list[dict]:
    """One evidence row for a patient question. For a population one, the cohort rows of one subject (the
    first, in random order, with at most MAX_ALTERED rows; else MAX_ALTERED rows of the first): touching a
    whole subject changes counts of patients or stays, not only means."""
    if patient:
        return rows.rows_at([int(rng.integers(rows.height))])
    sizes = rows.subject_sizes()
    subjects = sorted(sizes)
    if len(subjects) < 2:
        raise Rejected("cohort_of_one_subject")
    by_subject = [subjects[i] for i in rng.permutation(len(subjects))]
    subject = next((s for s in by_subject if sizes[s] <= MAX_ALTERED), by_subject[0])
    chosen = rows.subject_rows(subject)  # in the rows' order
    if len(chosen) > MAX_ALTERED:
        chosen = [chosen[i] for i in sorted(rng.choice(len(chosen), MAX_ALTERED, replace=False))]
    return chosen


def left_out_a_few(chosen: list[dict], rows: Cohort) -> None:
    """Rejected when a population repair would leave a third or more of the cohort's rows out: too little is left
    to answer from, and abstaining is as defensible (blind audit 31: a mean severity over 5 admissions, 4 of them
    conflicting, repaired to the one left)."""
    if len(chosen) * 3 > rows.height:
        raise Rejected("cohort_mostly_changed")


def key_of(row: dict, key_columns: list[str]) -> dict:
    return {c: row[c] for c in key_columns}


def alteration(ev: Evidence, before: list[dict], after: list[dict]) -> Patch:
    """Rows `before` replaced by `after` (the same keys)."""
    hide = [key_of(row, ev.key_columns) for row in before]
    return Patch(tables={ev.table: TablePatch(key_columns=ev.key_columns, hide=hide, add=after)})


def flagged_on_source(con, ev: Evidence, rule: Rule) -> bool:
    """Whether the rule already fires on an evidence row in the clean source (then the task cannot serve)."""
    return bool(con.sql(f"SELECT 1 FROM ({ev.rows.sql()}) {ev.table} WHERE ({rule.sql}) LIMIT 1").fetchall())


def _table_guarded_python(template, gold, ev: Evidence, rule: Rule):
    """Guarded Python whose rule is evaluated on the whole table (it may look beyond the evidence rows)."""

    def reference(tables, slots):
        flagged = rule.flagged(tables[ev.table]).select(ev.key_columns).collect()
        fires = lambda rows: rows.join(flagged, on=ev.key_columns, how="semi", nulls_equal=True).height > 0  # noqa: E731
        return guarded_python(template, gold, ev.table, ev.keys, fires)(tables, slots)

    return reference


def scoped_twin(task, template, ev: Evidence, patch: Patch, rule: Rule) -> NoisyTwin:
    """Patient: abstain when an evidence row breaks the rule. Population: the gold answer over the rows that keep it."""
    gold, inspect = load_python_program(template), {"table": ev.table, "filter": task.slots}
    if is_patient(template):
        guard = f"EXISTS (SELECT 1 FROM evidence WHERE {rule.sql})"
        return NoisyTwin(
            patch,
            "abstain",
            AnswerValue(value=None),
            guarded_sql(task.gold_sql, ev.table, ev.keys, guard),
            _table_guarded_python(template, gold, ev, rule),
            inspect,
        )
    return NoisyTwin(
        patch,
        "repair",
        None,
        excluding_sql(task.gold_sql, ev.table, rule.sql),
        excluding_python(gold, ev.table, rule.expr, rule.within),
        inspect,
    )


TIME_STEPS = (3600, 60, 1)  # whole hours, minutes, seconds: the coarsest a column's real times keep


def time_step(con, table: str, column: str) -> int:
    """The coarsest grid (seconds: an hour, a minute, a second) that 99% of the column's real times sit on (a fact
    of the source, read once per process: a scan of the whole column)."""
    bare = table.rsplit(".", 1)[-1]  # the source's table, however it is named
    return source_fact(con, ("time_step", bare, column), lambda source: _time_step(con, f"{source}{bare}", column))


def _time_step(con, table: str, column: str) -> int:
    aligned = ", ".join(f"avg((epoch({column})::BIGINT % {step} = 0)::INT)" for step in TIME_STEPS)
    shares = con.execute(f"SELECT {aligned} FROM {table} WHERE {column} IS NOT NULL").fetchall()[0]
    return next(
        (step for step, share in zip(TIME_STEPS, shares, strict=True) if share is not None and share >= 0.99), 1
    )


def time_shift(con, table: str, column: str, rng, low_hours: int = 2, high_hours: int = 30):
    """A shift of `low_hours` to `high_hours` written like the column's real times: whole hours only where
    its real times are all on the hour; else a shift that is not a whole number of hours (no round offset)."""
    step = time_step(con, table, column)
    while True:
        steps = int(rng.integers(low_hours * 3600 // step, high_hours * 3600 // step + 1))
        if step == 3600 or (steps * step) % 3600:
            return dt.timedelta(seconds=steps * step)
