"""missing_record (record level): every row the question could rest on is hidden; the answer is unsupported.

A patient question's rows that another table also records (siblings.yaml `witnesses`: an ICU patient's lab in
chartevents under a Labs item) are not hidden (`witnessed_elsewhere`); nor are encounters whose every column the
question reads another table keeps (siblings.yaml `records` with `keeps`: an ICU stay's times and unit are its
transfer's; `recorded_elsewhere`)."""

from __future__ import annotations

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.encounters import columns_read
from pipeline.noise.evidence import candidate_keys, evidence_table, rows_by_key
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.siblings import matching_rows, record_rules, witnessed
from pipeline.noise.slot_swap import concept_slots
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program
from pipeline.templates.spec import AnswerType

MAX_HIDDEN = 5_000  # a population question over more rows than this is not a missing-record item
# Zero is an answer: with the rows a count, a yes/no or a list rests on hidden, 0, "no" and "none" are what the
# record says (no abnormal potassium, never in the MICU, no procedure coded), so such a question abstains only when
# it asks about one encounter's rows of a table that every MIMIC-IV hospital admission has (billed diagnoses,
# services, transfers) and names no concept: then zero rows cannot be true.
ALWAYS_RECORDED = frozenset({"diagnoses_icd", "services", "transfers"})
ANSWERED_BY_ABSENCE = (AnswerType.count, AnswerType.boolean, AnswerType.list)


@register
class MissingRecord(NoiseSubtype):
    name = "missing_record"
    level = "record"
    version = 6  # 6: nor prescriptions whose pharmacy rows keep what the question reads (siblings.yaml `records`:
    # blind audit 35 read a Clopidogrel route share off the pharmacy rows of its 23 hidden prescriptions)
    # 5: not encounters another table keeps whole for the question (an ICU stay's transfer)
    # 2: rejected when the noisy data still answers the clean question; 3: zero, no, none are answers
    # 4: not where another table charts the same results (siblings.yaml witnesses: an ICU lab in chartevents)
    noisy_data_unanswerable = True

    requires = (
        "a value answer, or a count / yes-no / list over one encounter's rows of a table every admission "
        "has (diagnoses_icd, services, transfers) with no concept slot: zero, no and none are answers"
    )

    def applies(self, template):
        if template.spec.answer.type not in ANSWERED_BY_ABSENCE:
            return super().applies(template)
        return (
            super().applies(template)
            and template.spec.scope.value == "patient"
            and not concept_slots(template)
            and template.evidence_tables <= ALWAYS_RECORDED
        )

    def make(self, con, task, template, rng):
        table, _, _ = evidence_table(task)
        hidden = candidate_keys(con, task, template, at_most=MAX_HIDDEN)
        if not hidden or len(hidden) > MAX_HIDDEN:
            raise Rejected("too_many_candidate_rows" if hidden else "no_candidate_rows")
        key_columns = list(hidden[0])
        rows = rows_by_key(con, table, hidden)
        if template.spec.scope.value == "patient" and witnessed(con, table, rows):
            raise Rejected("witnessed_elsewhere")  # another table charts the same results (an ICU lab in chartevents)
        if _recorded_elsewhere(con, table, rows, template):
            raise Rejected("recorded_elsewhere")  # blind audit 30 rebuilt 23 hidden ICU stays from their transfers
        patch = Patch(tables={table: TablePatch(key_columns=key_columns, hide=hidden)})
        gold = load_python_program(template)
        return NoisyTwin(
            patch=patch,
            contract="abstain",
            expected=AnswerValue(value=None, unit=task.answer.unit if template.spec.answer.unit else None),
            reference_sql=guarded_sql(task.gold_sql, table, hidden, "(SELECT count(*) FROM evidence) = 0"),
            reference_python=guarded_python(template, gold, table, hidden, lambda rows: rows.height == 0),
            inspect={"table": table, "filter": task.slots},
        )


def _recorded_elsewhere(con, table: str, rows: list[dict], template) -> bool:
    """Another table records every hidden row with every column of `table` the gold SQL reads (siblings.yaml
    `records` rules with `keeps`)."""
    read = columns_read(template, table)
    for rule in record_rules(table):
        if "keeps" not in rule:  # the sibling records the encounter, not its columns (an admission's transfers)
            continue
        kept = {*rule["keeps"], *rule["match"], *rule.get("keys", [])}
        if read <= kept and all(matching_rows(con, rule, row) for row in rows):
            return True
    return False
