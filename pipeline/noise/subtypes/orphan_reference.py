"""orphan_reference (record level): the parent admission / ICU stay of the evidence rows is hidden.

Patient scope: the evidence references an encounter the record does not have; abstain (guard: an evidence
row's hadm_id / stay_id has no parent row). Population scope: the parents of a few evidence rows are hidden;
repair by answering over the rows whose parent exists (the orphaned rows are excluded).
Other tables that record the same encounter (siblings.yaml `records`: the admission's transfers and ICU stays,
the ICU stay's transfer) lose its rows too, or a careful analyst would find the encounter there; a question that
itself reads such a table (other than its evidence) is rejected (`question_reads_sibling`).
"""

from __future__ import annotations

from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected, register
from pipeline.noise.encounters import declared_evidence_tables, orphan_expr, orphan_sql, parent_encounter, with_tables
from pipeline.noise.evidence import evidence_table, frame_by_key
from pipeline.noise.exclusion import excluding_python, excluding_sql
from pipeline.noise.guards import guarded_python, guarded_sql
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.siblings import matching_rows, reads_table, record_rules
from pipeline.templates.answers import AnswerValue
from pipeline.templates.programs import load_python_program

MAX_ORPHANED = 3  # population scope: how many parent encounters are hidden


@register
class OrphanReference(NoiseSubtype):
    name = "orphan_reference"
    level = "record"
    version = 2  # 2: the encounter's rows in other tables that record it (transfers, ICU stays) are hidden too
    requires = "evidence rows of a table that references an encounter (not admissions itself)"

    def applies(self, template):
        """Listed, and the evidence is not the admission row itself (it must reference a parent encounter)."""
        return super().applies(template) and bool(declared_evidence_tables(template) - {"admissions"})

    def make(self, con, task, template, rng):
        table, _, keys = evidence_table(task)
        enc = parent_encounter(template, table)
        parents = frame_by_key(con, table, keys)[enc.key].drop_nulls().unique().sort().to_list()
        if not parents:
            raise Rejected("evidence_has_no_parent_key")
        patient, gold = template.spec.scope.value == "patient", load_python_program(template)
        if not patient:
            if len(parents) < 2:
                raise Rejected("too_few_parents")
            parents = sorted(rng.choice(parents, min(MAX_ORPHANED, len(parents) // 2), replace=False).tolist())
        patch = Patch(tables={enc.table: TablePatch(key_columns=[enc.key], hide=[{enc.key: p} for p in parents]),
                              **_records_of(con, enc, parents, table, task.gold_sql)})
        inspect = {"table": enc.table, "filter": {enc.key: parents}}
        if not patient:
            return NoisyTwin(patch, "repair", None, excluding_sql(task.gold_sql, table, orphan_sql(enc, table)),
                             with_tables(lambda tables: excluding_python(gold, table, orphan_expr(tables, enc))), inspect)

        def reference(tables):
            orphaned = orphan_expr(tables, enc).fill_null(False)
            return guarded_python(template, gold, table, keys, lambda ev: bool(ev.select(orphaned).to_series().any()))

        return NoisyTwin(patch, "abstain", AnswerValue(value=None),
                         guarded_sql(task.gold_sql, table, keys, f"EXISTS (SELECT 1 FROM evidence e WHERE {orphan_sql(enc, 'e')})"),
                         with_tables(reference), inspect)


def _records_of(con, enc, parents: list, evidence: str, gold_sql: str) -> dict[str, TablePatch]:
    """Hide patches for the rows of other tables that record the hidden encounters (not the evidence table)."""
    found = {}
    for rule in record_rules(enc.table):
        if rule["table"] == evidence:
            continue
        if reads_table(gold_sql, rule["table"]):
            raise Rejected("question_reads_sibling")
        encounters = con.execute(f"SELECT * FROM {enc.table} WHERE {enc.key} IN ({', '.join('?' for _ in parents)}) ORDER BY ALL", parents)
        names = [d[0] for d in encounters.description]
        rows = [r for e in encounters.fetchall() for r in matching_rows(con, rule, dict(zip(names, e)))]
        keys = {tuple(r[c] for c in rule["key"]): {c: r[c] for c in rule["key"]} for r in rows}
        if keys:
            found[rule["table"]] = TablePatch(key_columns=rule["key"], hide=[keys[k] for k in sorted(keys)])
    return found
