"""`cautious`: checks the evidence before answering, and answers NULL when the record does not support an answer.

Order of checks, each a query through the sql tool: the entities the question names exist (patient,
admission of that patient, ICU stay of that patient; concept names in their vocabulary tables); the
evidence rows exist (the template's evidence SQL, with its NOT NULL guards on value columns dropped so a
blanked value is seen); and no evidence row breaks a row rule (`checks.row_rules`: blank value,
placeholder text, impossible number, unit unlike the item's usual unit, conflicting duplicate, missing
parent encounter, time outside its encounter; a patient question also looks its parent admissions / stays
up explicitly). A patient question abstains when any check fails; a
population question abstains when a concept or the whole evidence is missing, and otherwise answers the
gold program over the rows that pass every rule (the repair contract).
"""

from __future__ import annotations

from pipeline.agents import register
from pipeline.agents.base import Agent, AgentContext, is_empty
from pipeline.agents.checks import (
    ENTITY_TABLES,
    entity_rows,
    evidence_source,
    item_units,
    item_units_sql,
    keyed_rows,
    parent_check_sql,
    patient_flags_sql,
    row_rules,
    unordered,
    without_value_guards,
)
from pipeline.concepts import concept_key, concept_sql
from pipeline.noise.exclusion import excluding_sql
from pipeline.templates.answers import AnswerValue
from pipeline.templates.render import sql_literal

NULL = AnswerValue(value=None)


@register
class Cautious(Agent):
    name = "cautious"

    def act(self, episode, context: AgentContext, seed: int) -> None:
        patient = context.template.spec.scope.value == "patient"
        if not self.entities_exist(episode, context) or not self.concepts_exist(episode, context):
            source = evidence_source(context.template)
            if source is not None:
                self.look(episode, source.table, context.slots)
            self.answer(episode, NULL)
            return
        self.answer(episode, self.checked_answer(episode, context, patient))

    def entities_exist(self, episode, context: AgentContext) -> bool:
        """Patient, admission and ICU stay named in the question exist (and belong to the patient)."""
        slots, subject = context.slots, context.slots.get("subject_id")
        for slot, table in ENTITY_TABLES.items():
            if slot in slots:
                owned = subject is not None and slot != "subject_id"
                mine = f" AND subject_id = {sql_literal(subject)}" if owned else ""
                if not self.count(episode, f"{table} WHERE {slot} = {sql_literal(slots[slot])}{mine}"):
                    return False
        return True

    def concepts_exist(self, episode, context: AgentContext) -> bool:
        """Every concept name of the question (a slot with a vocabulary) is in its vocabulary table, matched as
        the templates match it (case, spacing and tall-man spelling aside: 'Trazodone' is 'TraZODone')."""
        for name, slot in sorted(context.template.spec.slots.items()):
            if slot.vocabulary is not None and name in context.slots:
                table, column = slot.vocabulary.split(".")
                wanted = sql_literal(concept_key(context.slots[name]))
                if not self.count(episode, f"{table} WHERE {concept_sql(column)} = {wanted}"):
                    return False
        return True

    def count(self, episode, rows: str) -> int:
        """How many rows the FROM-clause SQL `rows` holds (0 when the query fails)."""
        found = self.sql(episode, f"SELECT count(*) AS n FROM {rows}")
        return 0 if found is None else int(found.item(0, 0))

    def checked_answer(self, episode, context: AgentContext, patient: bool) -> AnswerValue:
        source = evidence_source(context.template)
        gold = context.render(context.template.gold_sql)
        if source is None:  # evidence spread over tables: no row rules, the gold answer stands
            return self.canonical(self.sql(episode, gold), context)
        evidence = context.render(context.template.evidence_sql)
        if patient:
            evidence = without_value_guards(evidence, source.table)
        keyed = keyed_rows(source, evidence)
        units_sql = item_units_sql(source.table, keyed)
        units = self.sql(episode, units_sql) if units_sql else None
        items = item_units(list(units.iter_rows())) if units is not None else None
        rules = row_rules(context.template, source.table, items, patient)
        if patient:
            return self.patient_answer(episode, context, source, evidence, rules, gold)
        return self.population_answer(episode, context, source, keyed, rules, gold)

    def patient_answer(self, episode, context, source, evidence: str, rules: dict, gold: str) -> AnswerValue:
        """NULL when a row breaks a rule, the entity has no row at all or a row's parent encounter is missing.
        No evidence row but rows of the entity (a drug given, only not in the asked window) is a real answer."""
        keyed, candidates = keyed_rows(source, evidence), keyed_rows(source, unordered(evidence))
        row_sets = {
            "answer_rows": keyed,
            "candidate_rows": candidates,
            "entity_rows": entity_rows(source.table, context.slots, candidates),
        }
        flags = self.sql(episode, patient_flags_sql(row_sets, rules, source.table))
        if flags is None or any(flags.item(0, name) > 0 for name in rules):
            return NULL
        if flags.item(0, "n_rows") == 0 and flags.item(0, "n_entity") == 0:  # nothing recorded for the entity at all
            return NULL
        checks_parents = "orphan_reference" in context.template.spec.noise
        if checks_parents and not self.parents_exist(episode, context, source, keyed):
            return NULL  # a referenced admission / stay is missing
        return self.canonical(self.sql(episode, gold), context)

    def parents_exist(self, episode, context, source, keyed: str) -> bool:
        """Every admission / ICU stay the evidence rows reference is in its table."""
        check = parent_check_sql(context.template, source.table, keyed)
        if check is None:
            return True
        parents = self.sql(episode, check[0])
        if parents is None or parents.height == 0:
            return True
        table, key = check[1].split(".")
        listed = ", ".join(sql_literal(v) for v in parents["parent"].to_list())
        return self.count(episode, f"{table} WHERE {key} IN ({listed})") == parents.height

    def population_answer(self, episode, context, source, keyed: str, rules: dict, gold: str) -> AnswerValue:
        """NULL when the cohort has no evidence row; else the gold program over the rows that pass every rule."""
        if not self.count(episode, keyed):
            self.look(episode, source.table, context.slots)
            return NULL
        if rules:
            gold = excluding_sql(gold, source.table, " OR ".join(f"({sql})" for sql in rules.values()))
        answer = self.canonical(self.sql(episode, gold), context)
        return NULL if is_empty(answer) else answer

    def look(self, episode, table: str, slots: dict) -> None:
        """Before abstaining: look at the table's rows of every entity the question names."""
        rows = entity_rows(table, slots)
        if rows:
            self.count(episode, rows)
