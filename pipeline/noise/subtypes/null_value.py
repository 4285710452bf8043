"""null_value (value level): the value of the measurement the answer rests on becomes NULL; abstain."""

from __future__ import annotations

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.evidence import evidence_table, rows_by_key
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.measurements import measurement_tables
from pipeline.noise.patch import Patch, TablePatch
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program


@register
class NullValue(NoiseSubtype):
    name = "null_value"
    level = "value"

    def applies(self, template):
        return super().applies(template) and template.spec.scope.value == "patient"

    def make(self, con, task, template, rng):
        table, key_columns, keys = evidence_table(task)
        facts = measurement_tables().get(table)
        if facts is None:
            raise Rejected("not_a_measurement_table")
        rows = rows_by_key(con, table, keys)
        if len(rows) != len(keys) or any(row[facts.number] is None for row in rows):
            raise Rejected("evidence_not_clean")
        blanked = [{**row, facts.number: None, **({facts.text: None} if facts.text else {})} for row in rows]
        patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=keys, add=blanked)})
        gold, number = load_python_program(template), facts.number
        return NoisyTwin(
            patch=patch,
            contract="abstain",
            expected=AnswerValue(value=None),
            reference_sql=guarded_sql(task.gold_sql, table, keys, f"EXISTS (SELECT 1 FROM evidence WHERE {number} IS NULL)"),
            reference_python=guarded_python(template, gold, table, keys, lambda ev: ev[number].is_null().any()),
            inspect={"table": table, "filter": task.slots},
        )
