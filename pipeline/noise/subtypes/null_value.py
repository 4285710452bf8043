"""null_value (value level): the value the answer rests on becomes NULL; abstain.

A measurement loses its number (its text, and each nulled column's unit where that column's numberless rows carry
none: an infusion's amountuom, rateuom, totalamountuom); a record
of another table (an admission, an order, a culture) loses the value column its question reads (`values` in
duplicates.yaml: discharge location, route, ...).
The same fact kept elsewhere (siblings.yaml) goes with it, or a careful analyst would read it there: a lab's
text `value` with its `valuenum`, a susceptibility's MIC (dilution) with its interpretation, the pharmacy row's
start / stop time and route with the prescription's, the ICU transfer's care unit with the stay's first unit.
Where another table may record the same event in its own vocabulary (siblings.yaml `witnesses`: an ICU procedure
event for a billed procedure), the candidate is rejected (`witnessed_elsewhere`); so is a result its own sample
lets one compute (siblings.yaml `derivations`: an anion gap from the specimen's electrolytes;
`derivable_from_sample`).
"""

from __future__ import annotations

from pipeline.db import source_fact
from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.evidence import evidence_table, rows_by_key
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.measurements import measurement_tables
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.rules import read_value_column
from pipeline.noise.siblings import always_accepted, companions, kept_elsewhere, shared_value, sibling_patch
from pipeline.source.schema import load_schema
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program


@register
class NullValue(NoiseSubtype):
    name = "null_value"
    level = "value"
    requires = "a patient-level template (a population answer over many rows survives one NULL)"
    version = 14  # 14: nor a red cell index, hemoglobin, hematocrit or red count beside the two others of its
    # formula (siblings.yaml derivations: MCH = Hgb x 10 / RBC, MCV, MCHC)
    # 13: a nulled procedure date is accepted beside abstaining wherever it is nulled (siblings.yaml
    # `always_accepted`: blind audit 35 dated a chest drain by the day's pleural fluid results and chest-tube order);
    # nor any member of a `solvable` relation beside the others (blind audit 37: a bicarbonate beside its anion gap)
    # 12: a companion's unit goes NULL with it where that column's numberless rows never carry one
    # (blind audit 32: a nulled infusion kept rateuom 'mL/hour' and totalamountuom 'ml', a pairing no real row has);
    # nor a susceptibility its panel implies by the row's shape (siblings.yaml `panels` `shape`); nor a stop time a
    # provider's discontinue order dates (siblings.yaml `implied`: blind audit 33), nor a blood gas's oxygen
    # saturation its pO2 computes (derivations)
    # 11: the unit goes NULL with the number where the table's rows without a number never carry
    # one (blind audit 28: 148 nulled diastolics still in mmHg were the only such chart rows); not a stop time the
    # admission's other orders discontinued at discharge share (siblings.yaml `implied`: blind audit 28)
    # 10: not a route the order's pharmacy type implies (siblings.yaml `implied`); a value every other
    # row of the encounter shares is accepted, or no noise is made where it is another (`shared`: blind audit 24)
    # 9: a lab's flag goes NULL with its number; not a result its sample computes (an anion gap from
    # its electrolytes; siblings.yaml derivations) nor an ICU dose the eMAR charted within an hour (blind audit 16)
    # 8: an infusion's amount goes NULL with its total, original rate and rate (a blind audit)
    # 7: not where another table may record the same event (siblings.yaml witnesses; a blind audit)
    # 6: a stay's first care unit goes NULL with its last (one transfer: the same unit; a blind audit)
    # 5: an infusion's amount goes NULL with its original amount (a blind audit: 50 mL kept there)
    # 3: the fact's companions (text value, MIC) and sibling rows (pharmacy, transfers) go NULL too;
    # 4: a procedure's date is its value (duplicates.yaml), not its code (a key column)

    def applies(self, template):
        return super().applies(template) and template.spec.scope.value == "patient"

    def make(self, con, task, template, rng):
        table, key_columns, keys = evidence_table(con, task)
        facts = measurement_tables().get(table)
        number = facts.number if facts else read_value_column(table, task.gold_sql)
        if number is None:
            raise Rejected("no_value_column")
        rows = rows_by_key(con, table, keys)
        if len(rows) != len(keys) or any(row[number] is None for row in rows):
            raise Rejected("evidence_not_clean")
        kept_elsewhere(con, table, rows, number)
        shared, value = shared_value(con, table, number, rows)  # the session's other procedures share one date
        if shared and any(row[number] != value for row in rows):
            raise Rejected("siblings_suggest_another")
        stating = [*companions(table, number), *([facts.text] if facts and facts.text else [])]
        # a unit beside no number would be the only one of its column (blind audit 32: nulled rates still in mL/hour)
        stating += [
            u for c, u in units_of(table, [number, *stating]).items() if not unit_without_number(con, table, c, u)
        ]
        blank = dict.fromkeys([number, *stating])
        blanked = [{**row, **blank} for row in rows]
        patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=list(keys), add=blanked)})
        patch = sibling_patch(con, table, rows, blanked, patch)
        gold = load_python_program(template)
        return NoisyTwin(
            patch=patch,
            contract="abstain",
            expected=AnswerValue(value=None),
            reference_sql=guarded_sql(
                task.gold_sql, table, keys, f"EXISTS (SELECT 1 FROM evidence WHERE {number} IS NULL)"
            ),
            reference_python=guarded_python(template, gold, table, keys, lambda ev: ev[number].is_null().any()),
            inspect={"table": table, "filter": task.slots},
            also_accepted=(task.answer,) if shared or always_accepted(table, number) else (),
        )


def units_of(table: str, columns: list[str]) -> dict[str, str]:
    """The unit column of each of `columns` that has one: the measurement's declared unit (measurements.yaml), else
    the MIMIC-IV `<column>uom` beside it (an infusion's rateuom, totalamountuom)."""
    facts, names = measurement_tables().get(table), load_schema()[table].column_names
    units = {facts.number: facts.unit} if facts and facts.unit else {}
    return {c: units.get(c, f"{c}uom") for c in columns if c in units or f"{c}uom" in names}


def unit_without_number(con, table: str, number: str, unit: str) -> bool:
    """Rows of the source table without a number carry a unit often enough (1 in 100) for another to pass unseen
    (demo labs: 4,218 of 9,588; infusion totals: 2 of 3,314; charts: none). A fact of the source, read once."""

    def often(source: str) -> bool:
        sql = f"SELECT count(*) FILTER (WHERE {unit} IS NOT NULL), count(*) FROM {source}{table} WHERE {number} IS NULL"
        ((with_unit, numberless),) = con.execute(sql).fetchall()
        return with_unit * 100 >= numberless > 0

    return source_fact(con, ("unit_without_number", table, number, unit), often)
