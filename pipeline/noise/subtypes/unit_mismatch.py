"""unit_mismatch (value level): a value is written in another unit than its item's expected one.

Expected unit of an item: its most frequent unit in the source (`units.yaml` also names the item, unit and
number columns of non-measurement tables, e.g. a prescription's drug, dose unit and dose).

Both scopes (repair): the evidence row (patient scope; population scope: one subject's cohort rows) holds the SAME
quantity re-expressed in another unit of the same dimension (`units.yaml` `re_expressed`, converted through the
verifier's `convert_unit`: 98.6 °F -> 37.0 °C, 1.2 L -> 1200 mL, 40 mg -> 0.04 g), written at the item's precision
plus the fewest decimals that keep it exact. A careful analyst converts it back, so the label is the clean answer;
the trap is the converted number read as if in the usual unit. Items without a same-dimension unit (cell counts,
molar vs mass) are rejected (`no_convertible_unit`): a relabel-only row is usually still readable in the usual unit
(3.55 "K/uL" of RBC is 3.55 m/uL), so no label follows from it. Nor does a relabel to a unit in which the number is
impossible (v3's population scope, 363 NTproBNP "ng/mL"): a careful analyst reads it as a mislabel and keeps it
(blind audit 16).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import polars as pl
import sqlglot
import yaml
from sqlglot import expressions as exp

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.measurements import item_precision, measurement_tables, written_like
from pipeline.noise.rules import (
    Evidence,
    Rule,
    alteration,
    fixes_unit,
    flagged_on_source,
    is_patient,
    pick,
    table_evidence,
    unit_columns,
)
from pipeline.templates.matching import convert_unit, normal_unit
from pipeline.templates.programs import load_python_program
from pipeline.templates.render import sql_literal

EXTRA_DECIMALS = 4  # a re-expressed dose text may use this many decimals beyond its own (40 mg -> 0.04 g); a
# measurement's number none beyond its item's real precision (more would be a tell: pipeline/noise/tells.py)


@dataclass(frozen=True)
class Units:
    table: str
    item: str
    unit: str
    number: str | None = None  # a numeric value column (measurements)
    text: str | None = None  # a text value column (a measurement's text, a prescription's dose)

    @property
    def value(self) -> str:
        """The column holding the value: the number, else the text."""
        column = self.number or self.text
        if column is None:
            raise ValueError(f"units.yaml: table {self.table} names neither a number nor a text column")
        return column


def units_of(table: str | None) -> Units | None:
    if table is None:
        return None
    facts = measurement_tables().get(table)
    if facts is not None:
        return Units(table, facts.item, facts.unit, facts.number, facts.text)
    columns = unit_columns().get(table)
    return Units(table, columns["item"], columns["unit"], None, columns.get("text")) if columns else None


@cache
def re_expressed_units() -> dict[str, str]:
    """{expected unit: another unit of its dimension the same quantity is written in} from `units.yaml`."""
    return yaml.safe_load(resources.files("pipeline.noise").joinpath("units.yaml").read_text())["re_expressed"]


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


@dataclass(frozen=True)
class Conversion:
    """Rows of `item` written in `unit` hold a quantity whose value in `expected` is number * slope + offset."""

    item: object
    unit: str
    expected: str

    @property
    def offset(self) -> float:
        return _converted(0.0, self.unit, self.expected)

    @property
    def slope(self) -> float:
        return _converted(1.0, self.unit, self.expected) - self.offset


def _converted(value: float, unit: str, target: str) -> float:
    """`value` in `unit` converted to `target`; a ValueError when the verifier knows no such conversion."""
    converted = convert_unit(value, unit, target)
    if converted is None:
        raise ValueError(f"unit_conversions.yaml: no conversion from {unit!r} to {target!r}")
    return converted


def conversion_of(item, expected: str) -> Conversion | None:
    """How an item's rows are re-expressed (None: its expected unit has no listed same-dimension unit)."""
    target = re_expressed_units().get(expected)
    if target is None or convert_unit(1.0, expected, target) is None:
        return None
    return Conversion(item, target, expected)


def written_as(con, units: Units, unit: str, item=None) -> str | None:
    """`unit` as the item's real rows spell it most often, else as the unit column's do (MIMIC writes grams 'g' and
    'gm'; blind audit 26 saw a dose in a spelling no row of its drug used); None when no real row of the column
    carries the unit in any spelling."""
    for where, params in (([f"{units.item} = ?"], [item]) if item is not None else ([], [])), ([], []):
        found = con.execute(
            f"SELECT {units.unit} FROM {units.table} WHERE {' AND '.join([f'{units.unit} IS NOT NULL', *where])} "
            "GROUP BY 1 ORDER BY count(*) DESC, 1",
            params,
        ).fetchall()
        spelt = next((spelling for (spelling,) in found if normal_unit(spelling) == normal_unit(unit)), None)
        if spelt is not None:
            return spelt
    return None


def re_expressed_number(value: float, decimals: int, conversion: Conversion, tolerance: float) -> tuple[float, int]:
    """`value` in the conversion's unit at the fewest decimals (up to `decimals`) whose conversion back gives
    `value` within half the template's tolerance; Rejected when none does (98.7 °F is no round number of °C)."""
    exact = _converted(value, conversion.expected, conversion.unit)
    for digits in range(decimals + 1):
        written = round(exact, digits)
        if written != 0 and abs(written * conversion.slope + conversion.offset - value) <= tolerance / 2:
            return written, digits
    raise Rejected("no_exact_conversion_at_precision")


def converted_row(con, units: Units, row: dict, conversion: Conversion, tolerance: float) -> dict:
    """The row with its value re-expressed in the conversion's unit: a measurement's number and text as its
    item's real rows write them, a dose text at its own decimals (or a few more: 0.04 g)."""
    facts = measurement_tables().get(units.table)
    if facts is not None:
        value, decimals = float(row[facts.number]), item_precision(con, facts, row[facts.item]).number
    else:
        value, decimals = dose_number(row[units.text])
    number, digits = re_expressed_number(value, decimals, conversion, tolerance)
    if number == value:
        raise Rejected("conversion_keeps_number")  # -40 °F is -40 °C: the row would not change its reading
    written = written_like(con, facts, row[facts.item], number) if facts else {units.text: f"{number:.{digits}f}"}
    return {**row, **written, **_ranges_in(facts, row, conversion), units.unit: conversion.unit}


def _ranges_in(facts, row: dict, conversion: Conversion) -> dict:
    """The row's reference range in the conversion's unit, as a lab reported in that unit carries it (blind audit
    29: a cholesterol of 1340 mg/L kept its 0-199 mg/dL range and no flag)."""
    if facts is None or facts.flag is None:
        return {}
    bounds = (facts.flag["below"], facts.flag["above"])
    return {
        c: None if row[c] is None else round(_converted(float(row[c]), conversion.expected, conversion.unit), 6)
        for c in bounds
    }


def dose_number(text) -> tuple[float, int]:
    """A dose text's number and the decimals a re-expressed one may use (its own plus EXTRA_DECIMALS)."""
    text = str(text).strip()
    try:
        return float(text), len(text.partition(".")[2]) + EXTRA_DECIMALS
    except ValueError:
        raise Rejected("value_not_a_number") from None


def _back_sql(units: Units, conversions: list[Conversion]) -> dict[str, str]:
    """{column: SQL expression} giving every re-expressed row's value and unit in its item's expected unit."""
    whens = lambda then: " ".join(  # noqa: E731
        f"WHEN {units.item} = {sql_literal(c.item)} AND {units.unit} = {sql_literal(c.unit)} THEN {then(c)}"
        for c in conversions
    )
    value = units.value
    number = f"TRY_CAST({value} AS DOUBLE)"
    back = f"CASE {whens(lambda c: f'{number} * {c.slope!r} + {c.offset!r}')} ELSE {number} END"
    columns = {units.unit: f"CASE {whens(lambda c: sql_literal(c.expected))} ELSE {units.unit} END"}
    columns[value] = back if units.number else f"CASE {whens(lambda c: f'CAST({back} AS VARCHAR)')} ELSE {value} END"
    return columns


def converting_sql(gold_sql: str, units: Units, conversions: list[Conversion]) -> str:
    """`gold_sql` reading `units.table` with every re-expressed row converted back (sqlglot keeps aliases)."""
    replace = ", ".join(f"{expr} AS {column}" for column, expr in _back_sql(units, conversions).items())
    tree = sqlglot.parse_one(gold_sql, dialect="duckdb")
    for node in list(tree.find_all(exp.Table)):
        if node.name != units.table or node.db:
            continue
        view = f"(SELECT * REPLACE ({replace}) FROM {units.table}) AS {node.alias or units.table}"
        node.replace(sqlglot.parse_one(f"SELECT * FROM {view}", dialect="duckdb").args["from_"].this)
    return tree.sql(dialect="duckdb")


def converting_python(gold, units: Units, conversions: list[Conversion]):
    """A `reference(tables, slots)`: the gold program with every re-expressed row converted back."""
    value = units.value

    def reference(tables, slots):
        number, unit = pl.col(value).cast(pl.Float64, strict=False), pl.col(units.unit)
        back, label = pl.col(value), unit
        for c in conversions:
            hit = (pl.col(units.item) == c.item) & (unit == c.unit)
            converted = number * c.slope + c.offset
            back = pl.when(hit).then(converted if units.number else converted.cast(pl.String)).otherwise(back)
            label = pl.when(hit).then(pl.lit(c.expected)).otherwise(label)
        frame = tables[units.table].with_columns(back.alias(value), label.alias(units.unit))
        return gold(tables.replaced({units.table: frame}), slots)

    return reference


def first_convertible(
    con, units: Units, rows: pl.DataFrame, conversions: dict, tolerance: float, rng
) -> tuple[dict, dict]:
    """The first row, in random order, whose value re-expresses exactly at its precision, and its converted copy
    (a stay's temperatures: 98.6 °F is 37.0 °C, 98.7 °F no round number of °C)."""
    reason = "no_convertible_unit"
    for i in rng.permutation(rows.height):
        row = rows.row(int(i), named=True)
        try:
            return row, converted_row(con, units, row, conversions[row[units.item]], tolerance)
        except Rejected as rejected:
            reason = rejected.reason
    raise Rejected(reason)


def _convertible_rows(con, units: Units, rows: list[dict], conversions: dict, tolerance: float):
    """(rows, their re-expressed copies) for the rows that re-express exactly; Rejected when none does."""
    chosen, altered, reason = [], [], "no_convertible_unit"
    for row in rows:
        try:
            altered.append(converted_row(con, units, row, conversions[row[units.item]], tolerance))
            chosen.append(row)
        except Rejected as rejected:
            reason = rejected.reason
    if not chosen:
        raise Rejected(reason)
    return chosen, altered


def re_expressed_twin(con, task, template, ev: Evidence, units: Units, expected: dict, rng) -> NoisyTwin:
    """One evidence row (patient scope) or one subject's cohort rows (population scope, those that re-express
    exactly) in another unit of the same dimension; the label is the clean answer."""
    conversions = {item: c for item, unit in sorted(expected.items()) if (c := conversion_of(item, unit))}
    spelled = {item: spelt for item, c in conversions.items() if (spelt := written_as(con, units, c.unit, item))}
    if conversions and not spelled:
        raise Rejected("unit_unknown_to_column")  # a unit no real row writes gives the row away
    conversions = {item: replace(conversions[item], unit=spelt) for item, spelt in spelled.items()}
    if not conversions:
        raise Rejected("no_convertible_unit")
    servable = ev.rows.filtered(f"{units.item} IN ({', '.join(sql_literal(item) for item in conversions)})")
    if servable.is_empty():
        raise Rejected("no_convertible_unit")
    tolerance = template.spec.answer.tolerance
    if is_patient(template):
        row, changed = first_convertible(con, units, servable.frame(), conversions, tolerance, rng)
        chosen, altered = [row], [changed]
    else:
        chosen, altered = _convertible_rows(con, units, pick(servable, False, rng), conversions, tolerance)
    listed = [conversions[item] for item in sorted(conversions)]
    return NoisyTwin(
        alteration(ev, chosen, altered),
        "repair",
        task.answer,
        converting_sql(task.gold_sql, units, listed),
        converting_python(load_python_program(template), units, listed),
        {"table": ev.table, "filter": task.slots},
    )


@register
class UnitMismatch(NoiseSubtype):
    name = "unit_mismatch"
    level = "value"
    requires = "evidence in a table with a unit column (measurements.yaml, units.yaml)"
    version = 6  # 6: a lab's reference range is re-expressed with its number (blind audit 29: 1340 mg/L beside a
    # 0-199 mg/dL range)
    # 5: the unit written as the column's real rows spell it ('gm', not 'g'), or no pair
    # 4: population scope re-expresses one subject's rows too (a relabelled number that is
    # impossible in its new unit is read through as a mislabel: blind audit 16, NTproBNP "ng/mL", NIBP "kPa")
    # 3: population relabels take a unit that does not fit (U/L for a mg/dL or mmol/L analyte; a
    # blind audit converted urea "mmol/L" through its molar mass)
    # 2: patient scope re-expresses the same quantity in a same-dimension unit (a repair to the clean
    # answer) instead of relabelling the number (abstain): a relabelled number is still readable in the usual unit

    def applies(self, template):
        return super().applies(template) and units_of(template.evidence_table) is not None

    def make(self, con, task, template, rng):
        if not is_patient(template) and fixes_unit(template):
            raise Rejected("question_fixes_unit")  # the cohort is filtered on the unit: a relabelled row just leaves it
        ev = table_evidence(con, task)
        units = units_of(ev.table)
        if units is None:
            raise Rejected("no_unit_column")
        if ev.rows.null_count(units.value):
            raise Rejected("evidence_not_clean")
        expected = expected_units(con, units, ev.rows.distinct(units.item))
        if not expected:  # the items carry no unit at all
            raise Rejected("no_convertible_unit")
        rule = wrong_unit_rule(units, expected)
        if flagged_on_source(con, ev, rule):
            raise Rejected("evidence_unit_not_expected")
        return re_expressed_twin(con, task, template, ev, units, expected, rng)
