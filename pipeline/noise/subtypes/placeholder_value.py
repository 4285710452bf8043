"""placeholder_value (value level): a value becomes a de-identification mask or an error text.

The texts and the text columns outside measurement tables are data (`placeholders.yaml`). A row is invalid when
it holds an error text, or a mask with no number beside it. Patient scope: the evidence row's text gets a mask or
error text (a measurement's number becomes NULL, and so do the row's columns stating the same fact, e.g. an
interpretation's MIC); abstain. Population scope: one subject's rows of a text column
outside the measurements (discharge location, route, dose, interpretation) get a mask; repair by answering over
valid rows. A population question over a measurement's number is left out: on the real demo every error text has
a NULL number (so the careless reading already skips the row: nothing to repair), and an error text beside a
number would contradict itself (which one does a careful analyst believe?).
Text columns outside measurements only take masks.
"""

from __future__ import annotations

import re

import polars as pl

from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.measurements import measurement_tables
from pipeline.noise.rules import (
    Rule,
    alteration,
    flagged_on_source,
    is_patient,
    left_out_a_few,
    pick,
    placeholders,
    scoped_twin,
    table_evidence,
)
from pipeline.noise.siblings import companions, kept_elsewhere, sibling_patch
from pipeline.templates.render import sql_literal
from pipeline.templates.spec import Scope


def value_columns(table: str | None, gold_sql: str) -> tuple[str, str | None] | None:
    """(text column, number column or None) a placeholder takes in this table for this gold program."""
    if table is None:
        return None
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
    # 2: sibling rows keeping the same fact (siblings.yaml: the pharmacy row's route) are masked alike
    # 3: no population question over a measurement's number (an error text beside a number contradicts itself)
    # 4: columns of the same row stating the same fact go NULL with the mask (siblings.yaml companions: a masked
    #    interpretation loses its MIC, a masked first care unit its last; a blind audit read the MIC)
    # 5: the order's other prescription rows (a diluent beside its drug) are masked alike (blind audit 16)
    version = 11  # 11: the red cell indices' formulas are solvable relations too (siblings.yaml derivations)
    # 10: nor any member of a `solvable` relation beside the others (siblings.yaml derivations)
    # 9: nor one its isolate's panel implies by the row's shape (siblings.yaml `panels` `shape`: blind
    # audit 32 read a masked clindamycin without an MIC, beside erythromycin R, as R); a population mask accepts the
    # clean answer beside the repair (blind audit 33)
    # 8: a population mask touches less than a third of the cohort's rows (`cohort_mostly_changed`);
    # not a susceptibility its isolate's other results imply (siblings.yaml `panels`: blind audits 28
    # and 30); not a stop time the admission's other orders discontinued at discharge share (`implied`)
    # 7: not a route the order's pharmacy type implies (siblings.yaml `implied`: blind audit 24)
    # 6: not a value the record keeps elsewhere (blind audit 22: an ERROR potassium charted in chartevents)
    requires = (
        "evidence in a table with a text value column (measurements.yaml, placeholders.yaml) the gold SQL "
        "reads; at population scope, one without a number beside it"
    )

    def applies(self, template):
        columns = value_columns(template.evidence_table, template.gold_sql)
        return (
            super().applies(template)
            and columns is not None
            and (template.spec.scope is Scope.patient or columns[1] is None)
        )

    def make(self, con, task, template, rng):
        ev = table_evidence(con, task)
        columns = value_columns(ev.table, task.gold_sql)
        if columns is None:
            raise Rejected("no_text_value_column")
        text, number = columns
        if ev.rows.null_count(text) or (number and ev.rows.null_count(number)):
            raise Rejected("evidence_not_clean")
        rule = placeholder_rule(text, number)
        if flagged_on_source(con, ev, rule):
            raise Rejected("evidence_has_placeholder")
        patient = is_patient(template)
        if number and not patient:
            raise Rejected("population_over_a_number")
        texts = placeholders()["masks"] + (placeholders()["errors"] if number else [])
        blank = dict.fromkeys([*([number] if number else []), *companions(ev.table, text)])
        chosen = pick(ev.rows, patient, rng)
        if not patient:
            left_out_a_few(chosen, ev.rows)
        kept_elsewhere(con, ev.table, chosen, text)  # an ICU lab's chartevents copy, a sample that computes it
        masked = [{**row, text: str(rng.choice(texts)), **blank} for row in chosen]
        patch = sibling_patch(con, ev.table, chosen, masked, alteration(ev, chosen, masked))  # pharmacy keeps the route
        twin = scoped_twin(task, template, ev, patch, rule)
        # a careful analyst may read a masked result off the rest of its panel, so the true rate stands beside the
        # repair (blind audit 33: a masked ampicillin/sulbactam R of a multi-resistant Klebsiella read as R)
        twin.accepts_clean = not patient
        return twin
