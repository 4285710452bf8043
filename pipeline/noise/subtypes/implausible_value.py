"""implausible_value (value level): the value becomes physiologically impossible.

Patient level: the measurement asked about is impossible, so the record does not support an answer (abstain);
where the answer summarises readings (a maximum) or picks one by time (the first, the latest), the answer over the
valid readings is accepted as well.
Population level: a few of the cohort's measurements become impossible; the answer is repaired by excluding
the impossible records and answering over the valid ones.
"""

from __future__ import annotations

import polars as pl

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.cohort import task_cohort
from pipeline.noise.evidence import evidence_table
from pipeline.noise.exclusion import excluding_python, excluding_sql
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.measurements import (
    MeasurementTable,
    PlausibleRange,
    impossible_sql,
    item_precision,
    measurement_tables,
    plausible_ranges,
)
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.siblings import kept_elsewhere
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program
from pipeline.templates.render import sql_literal

MAX_ALTERED = 3  # population level: how many of the cohort's measurements become impossible
SLIPS = (10, 100, 1000)  # a decimal point moved one to three places: what a careful analyst undoes
DRAWS = 20  # tries at an impossible number that is no slip


def impossible_expr(facts: MeasurementTable, ranges: dict[int, PlausibleRange]) -> pl.Expr:
    expr = pl.lit(False)
    for item, r in sorted(ranges.items()):
        number = pl.col(facts.number)
        expr = expr | ((pl.col(facts.item) == item) & ((number < r.low) | (number > r.high)))
    return expr


@register
class ImplausibleValue(NoiseSubtype):
    name = "implausible_value"
    level = "value"
    version = 10  # 10: ranges for 23 more labs (thyroid, iron studies, urine electrolytes, drug levels, ...: every
    # single-unit result population questions sample whose value nothing in its sample computes); no red cell
    # index, hemoglobin, hematocrit or red count beside the two others of its formula (a demo MCH made 447.7 beside
    # its specimen's Hgb 12.4 and RBC 4.27 is 29.0, as charted)
    # 9: ranges for 18 more labs (plausibility.yaml: whole-blood electrolytes, enzymes, troponin, urine pH
    # and specific gravity, ...; population questions asked about them and found no range)
    # 8: nor any member of a `solvable` relation beside the others (siblings.yaml derivations: blind
    # audit 37 rebuilt an impossible bicarbonate as 25 from its sample's sodium, chloride and anion gap)
    # 7: not a blood gas's oxygen saturation its pO2 computes, nor that pO2 (siblings.yaml
    # derivations: blind audit 33)
    # 6: where the answer summarises readings (a maximum), leaving the impossible one out is
    # accepted beside abstaining (blind audits 24 and 25 read the stay's highest valid heart rate)
    # 5: a lab's flag marks the impossible number abnormal (measurements.yaml `flag`: blind audit 24)
    # 4: 3-10x the upper bound, never a decimal slip of the true value (undone by blind audits 16-18);
    # not a lab chartevents also charts (blind audit 19 read a sodium of 707 as the chart's 146)
    # 3: not a result its sample computes (an anion gap from its electrolytes; blind audit 16)
    # 2: a decimal slip at the item's real precision, not a round multiple of the bound

    def make(self, con, task, template, rng):
        table, key_columns, count, cohort = task_cohort(con, task)
        facts, ranges = measurement_tables().get(table), plausible_ranges().get(table, {})
        if facts is None:
            raise Rejected("not_a_measurement_table")
        listed = ", ".join(sql_literal(item) for item in ranges)
        rows = cohort.filtered(f"{facts.number} IS NOT NULL AND {facts.item} IN ({listed})") if ranges else None
        if rows is None or rows.is_empty():
            raise Rejected("no_plausibility_range")
        patient = template.spec.scope.value == "patient"
        if patient and rows.height != count:
            raise Rejected("evidence_not_clean")
        picked = (
            range(rows.height)
            if patient
            else sorted(rng.choice(rows.height, min(MAX_ALTERED, max(1, rows.height // 2)), replace=False))
        )
        chosen = rows.rows_at(picked)
        kept_elsewhere(con, table, chosen)  # an ICU lab in chartevents, an anion gap its electrolytes compute
        altered = [self._impossible(con, row, facts, ranges[row[facts.item]], rng) for row in chosen]
        hide = [{c: row[c] for c in key_columns} for row in chosen]
        patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=hide, add=altered)})
        items = {item: ranges[item] for item in sorted(rows.distinct(facts.item))}
        rule_sql, rule_expr, gold = (
            impossible_sql(facts, items),
            impossible_expr(facts, items),
            load_python_program(template),
        )
        summarises = template.spec.answer.summarises_readings
        if patient:
            keys = evidence_table(con, task)[2]  # the guard names them
            return NoisyTwin(
                patch,
                "abstain",
                AnswerValue(value=None),
                guarded_sql(task.gold_sql, table, keys, f"EXISTS (SELECT 1 FROM evidence WHERE {rule_sql})"),
                guarded_python(template, gold, table, keys, lambda ev: ev.filter(rule_expr).height > 0),
                {"table": table, "filter": task.slots},
                readings=(excluding_sql(task.gold_sql, table, rule_sql),) if summarises else (),
            )
        return NoisyTwin(
            patch,
            "repair",
            None,
            excluding_sql(task.gold_sql, table, rule_sql),
            excluding_python(gold, table, rule_expr),
            {"table": table, "filter": task.slots},
        )

    @staticmethod
    def _impossible(con, row: dict, facts: MeasurementTable, bounds: PlausibleRange, rng) -> dict:
        """The row with its number impossible and not recoverable: 3 to 10 times the item's upper bound, written at
        the item's real precision (a heart rate stays an integer), and never the true value with its decimal point
        moved (blind audits 16 to 18 read 991 °F as 99.1, an INR of 140 as 1.4 and a WBC of 1500 as 15.0 from its
        differential: a careful analyst undoes a slip, so its abstain label punished the repair)."""
        value, precision = float(row[facts.number]), item_precision(con, facts, row[facts.item])
        for _ in range(DRAWS):
            number = precision.number_of(bounds.high * float(rng.uniform(3, 10)))
            slipped = any(precision.number_of(number / factor) == precision.number_of(value) for factor in SLIPS)
            if number > bounds.high and not slipped:
                text = {facts.text: precision.text_of(number)} if facts.text else {}
                return {**row, facts.number: number, **text, **facts.flagged(row, number)}
        raise Rejected("no_impossible_value_at_precision")  # a bound so small the precision rounds it back inside
