"""false_premise (query level): the question presupposes an event the patient never had; abstain.

The concept slot (one with a `vocabulary`) takes a value that other records hold but this patient's
admission / stay does not; values the same patient has in another encounter come first (a careless reader
may answer from there). A template without a concept slot swaps its admission for another admission of the
same patient in which the asked event never happened. Either way the gold program must find nothing.
"""

from __future__ import annotations

from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.slot_swap import ENTITY_SLOTS, concept_slots, gold_finds_nothing, swapped_twin, vocabulary

MAX_TRIES = 8  # candidate values tried (each costs one gold query)


@register
class FalsePremise(NoiseSubtype):
    name = "false_premise"
    level = "query"
    requires = "a patient-level template with a concept slot (one with a vocabulary) or both subject_id and hadm_id"

    def applies(self, template):
        slots = template.spec.slots
        return super().applies(template) and template.spec.scope.value == "patient" and (
            bool(concept_slots(template)) or {"subject_id", "hadm_id"} <= set(slots))

    def make(self, con, task, template, rng):
        concepts = concept_slots(template)
        slot = concepts[int(rng.integers(len(concepts)))] if concepts else "hadm_id"
        candidates = _concept_candidates(con, task, template, slot, rng) if concepts else _other_admissions(con, task)
        for value in candidates[:MAX_TRIES]:
            if gold_finds_nothing(con, template, task, {slot: value}):
                table, column = vocabulary(template, slot) if concepts else ("admissions", "hadm_id")
                return swapped_twin(template, task, {slot: value}, {"table": table, "filter": {column: value}})
        raise Rejected("gold_answers_every_candidate" if candidates else "no_candidate_value")


def _concept_candidates(con, task, template, slot, rng) -> list:
    """Sampler values of `slot` absent for this task's entity: the patient's own (other encounters) first."""
    entity = [s for s in ENTITY_SLOTS if s in task.slots]
    sampler = f"({template.spec.sampler}) s"
    patient = con.sql(f"SELECT DISTINCT {', '.join(entity)}, {slot} AS v FROM {sampler} WHERE subject_id = ? ORDER BY ALL",
                      params=[task.slots["subject_id"]]).pl()
    mine = set(patient.filter(*(patient[s] == task.slots[s] for s in entity))["v"].to_list())
    same_patient = sorted(set(patient["v"].drop_nulls().to_list()) - mine)
    everyone = [r[0] for r in con.execute(f"SELECT DISTINCT {slot} FROM {sampler} WHERE {slot} IS NOT NULL ORDER BY 1").fetchall()]
    others = sorted(set(everyone) - mine - set(same_patient))
    rng.shuffle(same_patient)
    rng.shuffle(others)
    return same_patient + others


def _other_admissions(con, task) -> list:
    """Other admissions of the same patient (the question then asks about an event that one never had)."""
    rows = con.execute("SELECT hadm_id FROM admissions WHERE subject_id = ? AND hadm_id <> ? ORDER BY hadm_id",
                       [task.slots["subject_id"], task.slots["hadm_id"]]).fetchall()
    return [r[0] for r in rows]
