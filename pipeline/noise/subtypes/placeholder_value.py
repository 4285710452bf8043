"""placeholder_value (value level): a value becomes a de-identification mask or an error text.

The texts and the text columns outside measurement tables are data (`placeholders.yaml`). A row is invalid when
it holds an error text, or a mask with no number beside it. Patient scope: the evidence row's text gets a mask or
error text (a measurement's number becomes NULL); abstain. Population scope: one subject's rows get an error
text (a measurement keeps its number, as a result reported in error does); repair by answering over valid rows.
Text columns outside measurements (discharge location, care unit, route...) only take masks.
"""

from __future__ import annotations

import re

import polars as pl

from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.measurements import measurement_tables
from pipeline.noise.rules import (
    Rule, alteration, evidence_table_name, flagged_on_source, is_patient, pick, placeholders, scoped_twin,
    table_evidence,
)
from pipeline.noise.siblings import sibling_patch
from pipeline.templates.render import sql_literal


def value_columns(table: str | None, gold_sql: str) -> tuple[str, str | None] | None:
    """(text column, number column or None) a placeholder takes in this table for this gold program."""
    facts = measurement_tables().get(table)
    if facts is not None:
        return (facts.text, facts.number) if facts.text else None
    read = [c for c in placeholders()["text_columns"].get(table, []) if re.search(rf"\b{c}\b", gold_sql)]
    return (read[0], None) if read else None


def placeholder_rule(text: str, number: str | None) -> Rule:
    """True for a row with an error text, or with a mask and no number."""
    masks, errors = placeholders()["masks"], placeholders()["errors"]
    listed = lambda texts: ", ".join(sql_literal(t) for t in texts)  # noqa: E731
    no_number_sql, no_number = (f"{number} IS NULL", pl.col(number).is_null()) if number else ("TRUE", pl.lit(True))
    sql = f"({text} IN ({listed(errors)}) OR ({text} IN ({listed(masks)}) AND {no_number_sql}))"
    return Rule(sql, pl.col(text).is_in(errors) | (pl.col(text).is_in(masks) & no_number))


@register
class PlaceholderValue(NoiseSubtype):
    name = "placeholder_value"
    level = "value"
    version = 2  # 2: sibling rows keeping the same fact (siblings.yaml: the pharmacy row's route) are masked alike
    requires = "evidence in a table with a text value column (measurements.yaml, placeholders.yaml) the gold SQL reads"

    def applies(self, template):
        return super().applies(template) and value_columns(evidence_table_name(template), template.gold_sql) is not None

    def make(self, con, task, template, rng):
        ev = table_evidence(con, task)
        columns = value_columns(ev.table, task.gold_sql)
        if columns is None:
            raise Rejected("no_text_value_column")
        text, number = columns
        if ev.rows[text].null_count() or (number and ev.rows[number].null_count()):
            raise Rejected("evidence_not_clean")
        rule = placeholder_rule(text, number)
        if flagged_on_source(con, ev, rule):
            raise Rejected("evidence_has_placeholder")
        patient = is_patient(template)
        texts = self._texts(patient, measurement=number is not None)
        blank = {number: None} if number and patient else {}
        chosen = pick(ev.rows, patient, rng)
        masked = [{**row, text: str(rng.choice(texts)), **blank} for row in chosen]
        patch = sibling_patch(con, ev.table, chosen, masked, alteration(ev, chosen, masked))  # pharmacy keeps the route
        return scoped_twin(task, template, ev, patch, rule)

    @staticmethod
    def _texts(patient: bool, measurement: bool) -> list[str]:
        """Measurements: masks or error texts (population: error texts, the number stays). Other columns: masks."""
        if not measurement:
            return placeholders()["masks"]
        return placeholders()["masks"] + placeholders()["errors"] if patient else placeholders()["errors"]
