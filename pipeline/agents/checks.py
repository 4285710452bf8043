"""Evidence checks of the `cautious` agent as SQL: where a template's evidence lives, the rules that make a row invalid.

The rules are domain knowledge kept as data in `pipeline/noise/*.yaml` (plausible ranges, unit confusions,
placeholder texts, what makes two rows one record) and the same row predicates the noise sub-types state;
none of them reads a label. A rule is checked only when the template declares that kind of noise can touch
it (`noise:` in its YAML, template-level knowledge), so clean data the template never doubts stays trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import sqlglot
from sqlglot import expressions as exp

from pipeline.noise.base import Rejected
from pipeline.noise.encounters import (
    ADMISSION,
    ROUTINE_LEAD_HOURS,
    STAY,
    Encounter,
    orphan_sql,
    outside_sql,
    parent_encounter,
)
from pipeline.noise.measurements import impossible_sql, measurement_tables, plausible_ranges
from pipeline.noise.rules import fixes_unit
from pipeline.noise.subtypes.conflicting_duplicate import record_of
from pipeline.noise.subtypes.displaced_time import TIME_COLUMNS
from pipeline.noise.subtypes.placeholder_value import placeholder_rule, value_columns
from pipeline.noise.subtypes.unit_mismatch import Units, units_of, wrong_unit_rule
from pipeline.source.schema import load_schema
from pipeline.templates.lint import sample_slots
from pipeline.templates.matching import convert_unit
from pipeline.templates.render import render_sql, sql_literal
from pipeline.templates.spec import Template

T = TypeVar("T")

# The entity a slot names and the table (and key) it must exist in.
ENTITY_TABLES = {"subject_id": "patients", "hadm_id": ADMISSION.table, "stay_id": STAY.table}


@dataclass(frozen=True)
class ItemUnits:
    """Per item: its usual unit, and the units a value of it can be read in (usual first or converting to it)."""

    usual: dict
    readable: dict


@dataclass(frozen=True)
class EvidenceSource:
    """The one table a template's evidence rows come from, and the key columns its evidence SQL returns."""

    table: str
    keys: tuple[str, ...]


def evidence_source(template: Template) -> EvidenceSource | None:
    """The evidence table and key columns from the template's evidence SQL (None: several tables)."""
    table = template.evidence_table
    if table is None:
        return None
    tree = sqlglot.parse_one(render_sql(template.evidence_sql, sample_slots(template)), dialect="duckdb")
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        raise ValueError("the evidence SQL has no SELECT")
    keys = tuple(e.alias_or_name for e in select.expressions if e.alias_or_name != "table_name")
    return EvidenceSource(table, keys)


def keyed_rows(source: EvidenceSource, evidence_sql: str) -> str:
    """FROM-clause SQL of the evidence table's rows whose keys the (rendered) evidence SQL returns."""
    keys = ", ".join(source.keys)
    return f"{source.table} WHERE ({keys}) IN (SELECT {keys} FROM ({evidence_sql.strip()}) AS e)"


def without_value_guards(evidence_sql: str, table: str) -> str:
    """The evidence SQL without `x IS NOT NULL` on the table's value columns: a blanked value is then seen."""
    columns = _value_columns(table)
    tree = sqlglot.parse_one(evidence_sql, dialect="duckdb")
    for node in list(tree.find_all(exp.Not)):
        inner = node.this
        if isinstance(inner, exp.Is) and isinstance(inner.this, exp.Column) and inner.this.name in columns:
            node.replace(exp.true())
    return tree.sql(dialect="duckdb")


def _value_columns(table: str) -> set[str]:
    facts = measurement_tables().get(table)
    return {column for column in (facts.number, facts.text) if column is not None} if facts else set()


# Which row set a patient-level rule reads: the rows the answer rests on, every candidate row of the question's
# filter (a blanked or masked value drops out of an ordered pick), or every row of the named entities (a row
# moved outside its encounter drops out of a time-windowed pick).
RULE_ROWS = {
    "null_value": "candidate_rows",
    "placeholder_value": "candidate_rows",
    "displaced_time": "entity_rows",
    "unit_mismatch": "entity_rows",
}


def row_rules(template: Template, table: str, items: ItemUnits | None, patient: bool) -> dict[str, str]:
    """{rule name: SQL predicate over rows of `table` (unaliased)} for the noise the template declares.
    `items`: the items' usual and readable units (`item_units`) for the unit and duplicate rules. A patient question
    checks its parent encounters with a query of their own (`parent_check_sql`), not with a rule."""
    declared, rules = set(template.spec.noise), {}
    builders = {
        "null_value": lambda: _null_rule(table) if patient else None,
        "placeholder_value": lambda: _placeholder(table, template),
        "implausible_value": lambda: _implausible(table),
        "unit_mismatch": lambda: None if fixes_unit(template) else _unit(table, items, patient),
        "conflicting_duplicate": lambda: _conflict(table, template, items),
        "orphan_reference": lambda: _orphan(template, table, patient),
        "displaced_time": lambda: _encounter_rule(template, table, lambda enc: _outside(enc, table)),
    }
    for name, build in builders.items():
        rule = build() if name in declared else None
        if rule:
            rules[name] = rule
    return rules


def _null_rule(table: str) -> str | None:
    facts = measurement_tables().get(table)
    if facts is None:
        return None
    return f"{facts.number} IS NULL" + (f" AND {facts.text} IS NULL" if facts.text else "")


def _placeholder(table: str, template: Template) -> str | None:
    columns = value_columns(table, template.gold_sql)
    return placeholder_rule(*columns).sql if columns else None


def _implausible(table: str) -> str | None:
    facts, ranges = measurement_tables().get(table), plausible_ranges().get(table)
    return impossible_sql(facts, ranges) if facts and ranges else None


def _unit(table: str, items: ItemUnits | None, patient: bool) -> str | None:
    """A row whose unit is not its item's usual one; for a patient question, nor one that converts to it (the
    careful reader converts such a value; a population answer leaves the row out)."""
    units = units_of(table)
    if units is None or items is None:
        return None
    known = {item: unit for item, unit in items.usual.items() if unit is not None}
    if not known:
        return None
    if not patient:
        return f"{units.unit} IS NOT NULL AND ({wrong_unit_rule(units, known).sql})"
    unreadable = " OR ".join(
        f"({units.item} = {sql_literal(item)} AND {units.unit} NOT IN "
        f"({', '.join(sql_literal(u) for u in items.readable[item])}))"
        for item in sorted(known)
    )
    return f"{units.unit} IS NOT NULL AND ({unreadable})"


def _conflict(table: str, template: Template, items: ItemUnits | None) -> str | None:
    record = record_of(table, template.gold_sql)
    if record is None:
        return None
    columns = ", ".join(record.group)
    usual = items.usual if items else {}
    listed = ", ".join(sql_literal(i) for i in sorted(usual))
    where = f" WHERE {record.item} IN ({listed})" if record.item and usual else ""
    return (
        f"({columns}) IN (SELECT {columns} FROM {table}{where} GROUP BY ALL HAVING count(DISTINCT {record.value}) > 1)"
    )


def _orphan(template: Template, table: str, patient: bool) -> str | None:
    return None if patient else _encounter_rule(template, table, lambda enc: orphan_sql(enc, table))


def _encounter_rule(template: Template, table: str, build: Callable[[Encounter], T]) -> T | None:
    try:
        enc = parent_encounter(template, table)
    except Rejected:
        return None
    if enc.key not in load_schema()[table].column_names:
        return None
    return build(enc)


def _outside(enc: Encounter, table: str) -> str | None:
    if table not in TIME_COLUMNS:
        return None
    time = TIME_COLUMNS[table][0]
    as_date = load_schema()[table].column(time).ddl_type.startswith("DATE")
    # labs and charted vitals are routinely recorded hours outside their encounter: only a row beyond is doubtful
    return outside_sql(enc, table, time, as_date, ROUTINE_LEAD_HOURS.get(table, 0))


def item_units_sql(table: str, keyed: str) -> str | None:
    """SQL of (item, unit, rows) over the whole table for the items of the keyed evidence rows (`item_units`)."""
    units: Units | None = units_of(table)
    if units is None:
        return None
    item, unit = units.item, units.unit
    return (
        f"SELECT {item} AS item, {unit} AS unit, count(*) AS n FROM {table} WHERE {unit} IS NOT NULL AND {item} IN "
        f"(SELECT {item} FROM {keyed}) GROUP BY {item}, {unit} ORDER BY {item}, n DESC, {unit}"
    )


def item_units(rows: list[tuple]) -> ItemUnits:
    """From (item, unit, rows) rows: each item's usual (most frequent) unit, and the units a careful reader can
    read a value of it in: the usual one and those that convert to it (the verifier's unit table: a temperature in
    °C for an item charted in °F, a dose in g for one ordered in mg)."""
    usual: dict = {}
    for item, unit, _ in rows:  # ordered by item, then most frequent first
        usual.setdefault(item, unit)
    readable = {
        item: sorted({u for i, u, _ in rows if i == item and (u == unit or convert_unit(1.0, u, unit) is not None)})
        for item, unit in usual.items()
    }
    return ItemUnits(usual, readable)


def unordered(sql: str) -> str:
    """A query without its outer ORDER BY and LIMIT: every row its filter admits."""
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    tree.set("limit", None)
    tree.set("order", None)
    return tree.sql(dialect="duckdb")


def entity_rows(table: str, slots: dict, items_of: str | None = None) -> str | None:
    """FROM-clause SQL of the table's rows of the question's entities (every slot that is a column of it);
    for a measurement table, of the items of the rows `items_of` (FROM-clause SQL) only."""
    columns = load_schema()[table].column_names
    pinned = [f"{name} = {sql_literal(value)}" for name, value in sorted(slots.items()) if name in columns]
    facts = measurement_tables().get(table)
    if pinned and facts and items_of:
        pinned.append(f"{facts.item} IN (SELECT {facts.item} FROM {items_of})")
    return f"{table} WHERE {' AND '.join(pinned)}" if pinned else None


def patient_flags_sql(row_sets: dict[str, str | None], rules: dict[str, str], table: str) -> str:
    """One row: the counts of rows the answer rests on and of the entities' rows, and per rule how many rows of
    its row set break it."""
    ctes = [f"{name} AS (SELECT * FROM {keyed})" for name, keyed in sorted(row_sets.items()) if keyed]
    counts = [
        "(SELECT count(*) FROM answer_rows) AS n_rows",
        f"(SELECT count(*) FROM {'entity_rows' if row_sets.get('entity_rows') else 'answer_rows'}) AS n_entity",
    ]
    for name, sql in sorted(rules.items()):
        rows = RULE_ROWS.get(name, "answer_rows")
        rows = rows if row_sets.get(rows) else "answer_rows"
        counts.append(f"(SELECT count(*) FROM {rows} AS {table} WHERE coalesce(({sql}), FALSE)) AS {name}")
    return f"WITH {', '.join(ctes)} SELECT {', '.join(counts)}"


def parent_check_sql(template: Template, table: str, keyed: str) -> tuple[str, str] | None:
    """(SQL of the distinct parent keys the rows reference, the parent table and key) for the orphan check."""
    return _encounter_rule(
        template,
        table,
        lambda enc: (
            f"SELECT DISTINCT {enc.key} AS parent FROM {keyed} AND {enc.key} IS NOT NULL ORDER BY 1",
            f"{enc.table}.{enc.key}",
        ),
    )
