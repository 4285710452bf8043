"""Encounters (admissions, ICU stays) as the parents and time windows of evidence rows.

Record-level noise on encounters needs rules that read a second table: an evidence row is orphaned when its
parent encounter is gone, displaced when its time lies outside the parent's admit/discharge (in/out) times.
Each rule exists in SQL (over a table alias) and in polars (given the overlay's tables), so the two
reference programs check each other.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl
import sqlglot
from sqlglot import expressions as exp

from pipeline.noise.base import Rejected
from pipeline.source.schema import load_schema
from pipeline.templates.lint import sample_slots
from pipeline.templates.render import render_sql
from pipeline.templates.spec import Template


@dataclass(frozen=True)
class Encounter:
    table: str
    key: str
    start: str
    end: str


STAY = Encounter("icustays", "stay_id", "intime", "outtime")
ADMISSION = Encounter("admissions", "hadm_id", "admittime", "dischtime")


def parent_encounter(template: Template, table: str) -> Encounter:
    """The encounter the evidence rows reference: the ICU stay unless the question is about an admission."""
    columns, slots = load_schema()[table].column_names, template.spec.slots
    asks_admission = "hadm_id" in slots and "stay_id" not in slots
    if "stay_id" in columns and table != STAY.table and not asks_admission:
        return STAY
    if "hadm_id" in columns and table != ADMISSION.table:
        return ADMISSION
    raise Rejected("evidence_is_the_encounter")


_KEYS = frozenset({"subject_id", "hadm_id", "stay_id"})
_OFFSET = (
    exp.Add,
    exp.Sub,
    exp.DateAdd,
    exp.DateSub,
    exp.TimestampAdd,
    exp.TimestampSub,
    exp.DateDiff,
    exp.TimestampDiff,
)


def gold_tree(template: Template) -> exp.Expr:
    """The template's gold SQL, rendered with sample slots, as a sqlglot tree."""
    return sqlglot.parse_one(render_sql(template.gold_sql, sample_slots(template)), dialect="duckdb")


def columns_read(template: Template, table: str) -> set[str]:
    """The columns of `table` the gold SQL reads: through the table's aliases, or unqualified where the SQL reads
    that table under one name (a CTE's own columns are not the table's)."""
    tree = gold_tree(template)
    aliases = {t.alias_or_name for t in tree.find_all(exp.Table) if t.name == table}
    named = {c.name for c in tree.find_all(exp.Column) if c.table in aliases or (not c.table and len(aliases) == 1)}
    return named & set(load_schema()[table].column_names)


def needs_encounter(template: Template, enc: Encounter) -> bool:
    """The gold SQL needs what only the encounter row holds: a window offset from its times (the first 24 hours
    of the admission), or an attribute that is not a key or a time. A key, or a time the evidence is merely
    compared with ("after the stay began"), does not count: the evidence rows carry the encounter's key, so a
    careful analyst answers such a question from them alone."""
    tree = gold_tree(template)
    aliases = {t.alias_or_name for t in tree.find_all(exp.Table) if t.name == enc.table}
    times = {enc.start, enc.end}
    for column in tree.find_all(exp.Column):
        if column.table not in aliases or column.name in _KEYS:
            continue
        user = column.parent
        while isinstance(user, exp.Cast | exp.Paren):
            user = user.parent
        if column.name not in times or isinstance(user, _OFFSET):
            return True
    return False


def with_tables(build):
    """A `reference(tables, slots)` whose program is built from the tables it runs on."""
    return lambda tables, slots: build(tables)(tables, slots)


# --- orphaned rows: the parent key is set but no parent row has it ---------------------------------------


def orphan_sql(enc: Encounter, alias: str) -> str:
    return f"{alias}.{enc.key} NOT IN (SELECT p.{enc.key} FROM {enc.table} p WHERE p.{enc.key} IS NOT NULL)"


def orphan_expr(tables, enc: Encounter) -> pl.Expr:
    parents = tables[enc.table].select(enc.key).collect()[enc.key]
    return ~pl.col(enc.key).is_in(parents.implode())


# --- displaced rows: the time lies outside the parent's window -------------------------------------------


def _bound(enc: Encounter, column: str, as_date: bool, alias: str = "p") -> str:
    return f"CAST({alias}.{column} AS DATE)" if as_date else f"{alias}.{column}"


# Rows of timed tables are routinely recorded a little outside their encounter (labs drawn in the ED before the
# admission, eMAR doses and orders charted before the admittime, vitals charted before the ICU in-time), never by
# much: on the MIMIC-IV demo 2.5% of labs precede their admission's admittime, 1.1% of eMAR rows (371) and 1.1% of
# prescriptions (196), 0.5% of charted values precede their stay's intime; none by 24 hours but one prescription.
# A row displaced outside its encounter goes beyond this lead, or it would look like a routine early record, not
# like noise; the guard, the repair and the cautious agent all widen the window by the same lead (a date column:
# by the lead's whole days).
ROUTINE_LEAD_HOURS = dict.fromkeys(
    [
        "labevents",
        "chartevents",
        "outputevents",
        "inputevents",
        "emar",
        "prescriptions",
        "procedures_icd",
        "procedureevents",
        "services",
        "icustays",
    ],
    24,
)


def lead_of(table: str) -> int:
    """The routine lead (hours) of a table's times around their encounter (0 for an untimed table)."""
    return ROUTINE_LEAD_HOURS.get(table, 0)


def outside_sql(enc: Encounter, alias: str, time: str, as_date: bool, lead_hours: int = 0) -> str:
    """True when row `alias` has a parent whose window its `time` falls outside of (the window widened by
    `lead_hours` on both sides; by its whole days for a date)."""
    start, end = _bound(enc, enc.start, as_date), _bound(enc, enc.end, as_date)
    width = f"INTERVAL {int(lead_hours) // 24} DAY" if as_date else f"INTERVAL {int(lead_hours)} HOUR"
    if lead_hours:
        start, end = f"({start} - {width})", f"({end} + {width})"
    return (
        f"EXISTS (SELECT 1 FROM {enc.table} p WHERE p.{enc.key} = {alias}.{enc.key} AND "
        f"({alias}.{time} < {start} OR {alias}.{time} > {end}))"
    )


def outside_mask(frame: pl.DataFrame, tables, enc: Encounter, time: str, lead_hours: int = 0) -> pl.Series:
    """Per row of `frame` (in order): its time lies outside its parent's window widened by `lead_hours`
    (False without a parent)."""
    windows = tables[enc.table].select(enc.key, __start=pl.col(enc.start), __end=pl.col(enc.end)).collect()
    lead = dt.timedelta(hours=int(lead_hours))
    if frame.schema[time] == pl.Date:
        lead = dt.timedelta(days=int(lead_hours) // 24)
        windows = windows.with_columns(pl.col("__start", "__end").dt.date())
    windows = windows.with_columns(pl.col("__start") - lead, pl.col("__end") + lead)
    joined = frame.select(enc.key, time).with_row_index("__row").join(windows, on=enc.key, how="left")
    outside = (pl.col(time) < pl.col("__start")) | (pl.col(time) > pl.col("__end"))
    flags = joined.group_by("__row").agg(outside.fill_null(False).any().alias("out")).sort("__row")
    return flags["out"]
