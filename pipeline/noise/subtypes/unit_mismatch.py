"""unit_mismatch (value level): a value keeps its number but is labelled with a confusable wrong unit.

Expected unit of an item: its most frequent unit in the source; the wrong unit comes from `units.yaml` (which
also names the item and unit columns of non-measurement tables, e.g. a prescription's drug and dose unit).
Patient scope abstains (an evidence row's unit is not its item's expected unit); population scope repairs by
answering over the rows whose unit is their item's expected unit.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.measurements import measurement_tables
from pipeline.noise.rules import (
    Rule, alteration, confusable_units, evidence_table_name, flagged_on_source, is_patient, pick, scoped_twin,
    table_evidence, unit_columns,
)
from pipeline.templates.render import sql_literal


@dataclass(frozen=True)
class Units:
    table: str
    item: str
    unit: str


def units_of(table: str | None) -> Units | None:
    facts = measurement_tables().get(table)
    if facts is not None:
        return Units(table, facts.item, facts.unit)
    columns = unit_columns().get(table)
    return Units(table, columns["item"], columns["unit"]) if columns else None


def expected_units(con, units: Units, items: set) -> dict:
    """{item: its most frequent non-NULL unit in the source} (ties: the smallest unit text)."""
    listed, item, unit = ", ".join(sql_literal(i) for i in sorted(items)), units.item, units.unit
    rows = con.sql(
        f"SELECT {item}, {unit} FROM {units.table} WHERE {unit} IS NOT NULL AND {item} IN ({listed}) "
        f"GROUP BY {item}, {unit} QUALIFY row_number() OVER (PARTITION BY {item} ORDER BY count(*) DESC, {unit}) = 1"
    ).fetchall()
    return dict(rows)


def wrong_unit_rule(units: Units, expected: dict) -> Rule:
    """True for a row of one of the items whose unit is not the item's expected unit."""
    sql = " OR ".join(
        f"({units.item} = {sql_literal(item)} AND {units.unit} IS DISTINCT FROM {sql_literal(unit)})"
        for item, unit in sorted(expected.items())
    )
    expr = pl.lit(False)
    for item, unit in sorted(expected.items()):
        expr = expr | ((pl.col(units.item) == item) & pl.col(units.unit).ne_missing(unit))
    return Rule(sql, expr)


@register
class UnitMismatch(NoiseSubtype):
    name = "unit_mismatch"
    level = "value"
    requires = "evidence in a table with a unit column (measurements.yaml, units.yaml)"

    def applies(self, template):
        return super().applies(template) and units_of(evidence_table_name(template)) is not None

    def make(self, con, task, template, rng):
        if not is_patient(template) and any("unit" in slot for slot in template.spec.slots):
            raise Rejected("question_fixes_unit")  # the cohort is filtered on the unit: a relabelled row just leaves it
        ev = table_evidence(con, task)
        units = units_of(ev.table)
        if units is None:
            raise Rejected("no_unit_column")
        if ev.facts is not None and ev.rows[ev.facts.number].null_count():
            raise Rejected("evidence_not_clean")
        expected = expected_units(con, units, set(ev.rows[units.item].to_list()))
        confusable = [item for item, unit in expected.items() if confusable_units().get(unit)]
        servable = ev.rows.filter(pl.col(units.item).is_in(confusable))
        if servable.is_empty():
            raise Rejected("no_unit_rule")
        rule = wrong_unit_rule(units, expected)
        if flagged_on_source(con, ev, rule):
            raise Rejected("evidence_unit_not_expected")
        chosen = pick(servable, is_patient(template), rng)
        relabelled = [{**row, units.unit: confusable_units()[expected[row[units.item]]]} for row in chosen]
        return scoped_twin(task, template, ev, alteration(ev, chosen, relabelled), rule)
