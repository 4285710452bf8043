"""orphan_reference (record level): the parent admission / ICU stay of the evidence rows is hidden.

Only a question that needs the encounter row itself applies (`needs_encounter`: a window offset from its times,
such as the first 24 hours of the admission, or an attribute that is no key): the evidence rows carry the
encounter's key, so "how many abnormal results in admission X" is answered from them alone, parent or not.
The evidence references an encounter the record does not have, so the window cannot be placed: abstain (guard:
an evidence row's hadm_id / stay_id has no parent row). Patient scope only: a population question that needs the
encounter row drops the orphaned rows by its own join, so the careless reading already gives the repaired answer.
Other tables that record the same encounter (siblings.yaml `records`: the admission's transfers and ICU stays,
the ICU stay's transfer) lose its rows too, or a careful analyst would find the encounter there; a question that
itself reads such a table (other than its evidence) is rejected (`question_reads_sibling`).
"""

from __future__ import annotations

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.encounters import (
    needs_encounter,
    orphan_expr,
    orphan_sql,
    parent_encounter,
    with_tables,
)
from pipeline.noise.evidence import evidence_table, frame_by_key
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.siblings import matching_rows, reads_table, record_rules
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program
from pipeline.templates.spec import Scope


@register
class OrphanReference(NoiseSubtype):
    name = "orphan_reference"
    level = "record"
    # 2: the encounter's rows in other tables that record it (transfers, ICU stays) are hidden too
    # 3: only patient questions that need the encounter row (a window offset from its times); its services too
    # 4: a hidden ICU stay is placed by the gap its transfer leaves (recovery.yaml anchor_range `gap`: blind audit 23)
    version = 4
    requires = (
        "patient scope, and evidence rows that reference an encounter whose times bound the question's "
        "window (or whose non-key attributes it reads)"
    )

    def applies(self, template):
        """Listed, patient scope, and the gold SQL needs the parent encounter of an evidence table."""
        return (
            super().applies(template)
            and template.spec.scope is Scope.patient
            and any(_needs_parent(template, table) for table in template.evidence_tables - {"admissions"})
        )

    def make(self, con, task, template, rng):
        table, _, keys = evidence_table(con, task)
        enc = parent_encounter(template, table)
        if not needs_encounter(template, enc):
            raise Rejected("children_answer_without_parent")
        parents = frame_by_key(con, table, keys)[enc.key].drop_nulls().unique().sort().to_list()
        if not parents:
            raise Rejected("evidence_has_no_parent_key")
        patch = Patch(
            tables={
                enc.table: TablePatch(key_columns=[enc.key], hide=[{enc.key: p} for p in parents]),
                **_records_of(con, enc, parents, table, task.gold_sql),
            }
        )
        gold = load_python_program(template)

        def reference(tables):
            orphaned = orphan_expr(tables, enc).fill_null(False)
            return guarded_python(template, gold, table, keys, lambda ev: bool(ev.select(orphaned).to_series().any()))

        return NoisyTwin(
            patch,
            "abstain",
            AnswerValue(value=None),
            guarded_sql(task.gold_sql, table, keys, f"EXISTS (SELECT 1 FROM evidence e WHERE {orphan_sql(enc, 'e')})"),
            with_tables(reference),
            {"table": enc.table, "filter": {enc.key: parents}},
        )


def _needs_parent(template, table: str) -> bool:
    try:
        return needs_encounter(template, parent_encounter(template, table))
    except Rejected:
        return False


def _records_of(con, enc, parents: list, evidence: str, gold_sql: str) -> dict[str, TablePatch]:
    """Hide patches for the rows of other tables that record the hidden encounters (not the evidence table)."""
    found = {}
    for rule in record_rules(enc.table):
        if rule["table"] == evidence:
            continue
        if reads_table(gold_sql, rule["table"]):
            raise Rejected("question_reads_sibling")
        encounters = con.execute(
            f"SELECT * FROM {enc.table} WHERE {enc.key} IN ({', '.join('?' for _ in parents)}) ORDER BY ALL", parents
        )
        names = [d[0] for d in encounters.description]
        rows = [r for e in encounters.fetchall() for r in matching_rows(con, rule, dict(zip(names, e)))]
        keys = {tuple(r[c] for c in rule["key"]): {c: r[c] for c in rule["key"]} for r in rows}
        if keys:
            found[rule["table"]] = TablePatch(key_columns=rule["key"], hide=[keys[k] for k in sorted(keys)])
    return found
