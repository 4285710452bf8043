"""nonexistent_entity (query level): the question names a patient, admission or stay the record lacks."""

from __future__ import annotations

from pipeline.noise.base import NoiseSubtype, NoisyTwin, register
from pipeline.noise.fresh_ids import scattered
from pipeline.noise.patch import Patch
from pipeline.templates.answers import AnswerValue
from pipeline.templates.instantiate import typed_slots
from pipeline.templates.programs import load_python_program
from pipeline.templates.render import render_sql

# entity slot -> (table, column) where its identifiers live; the most specific present slot is replaced
ENTITY_SLOTS = {
    "stay_id": ("icustays", "stay_id"),
    "hadm_id": ("admissions", "hadm_id"),
    "subject_id": ("patients", "subject_id"),
}


@register
class NonexistentEntity(NoiseSubtype):
    name = "nonexistent_entity"
    level = "query"
    requires = "an entity slot (subject_id, hadm_id or stay_id)"
    version = 3  # 2: identifiers above the largest (same digit count) are candidates too
    # 3: drawn inside the observed range, no closer to a real id than real ids are to each other (no tell)

    def applies(self, template):
        return super().applies(template) and any(slot in template.spec.slots for slot in ENTITY_SLOTS)

    def make(self, con, task, template, rng):
        slot = next(s for s in ENTITY_SLOTS if s in task.slots)
        table, column = ENTITY_SLOTS[slot]
        candidate = scattered(con, table, column, rng, [])  # inside the real ids' range, spaced like them
        slots = {**task.slots, slot: candidate}
        return NoisyTwin(
            patch=Patch(slots={slot: candidate}),
            contract="abstain",
            expected=AnswerValue(value=None),
            reference_sql=render_sql(template.gold_sql, typed_slots(template, slots)).strip(),
            reference_python=load_python_program(template),
            inspect={"table": table, "filter": {column: candidate}},
        )
