"""Query-level noise helpers: swap question slots, check the gold program finds nothing, build the twin."""

from __future__ import annotations

from typing import Any

import polars as pl

from pipeline.concepts import concept_is, concept_key, concept_sql
from pipeline.noise.base import NoisyTwin
from pipeline.noise.patch import Patch
from pipeline.templates.answers import AnswerValue, canonical_answer, is_empty
from pipeline.templates.instantiate import CleanTask, typed_slots
from pipeline.templates.programs import load_python_program, run_sql
from pipeline.templates.render import render_sql, sql_literal
from pipeline.templates.spec import Template

ENTITY_SLOTS = ("subject_id", "hadm_id", "stay_id")


def concept_slots(template: Template) -> list[str]:
    """Slots naming a clinical concept: those with a `vocabulary` (table.column of the valid names)."""
    return [name for name, slot in template.spec.slots.items() if slot.vocabulary]


def vocabulary(template: Template, slot: str) -> tuple[str, str]:
    named = template.spec.slots[slot].vocabulary
    if named is None:
        raise ValueError(f"template {template.id}: slot {slot!r} has no vocabulary (table.column)")
    table, column = named.split(".")
    return table, column


def gold_finds_nothing(con, template: Template, task: CleanTask, changed: dict[str, Any]) -> bool:
    """The gold SQL, run with the changed slots on the source, has no answer."""
    frame = run_sql(con, template.gold_sql, typed_slots(template, {**task.slots, **changed}))
    return frame.height == 0 or is_empty(canonical_answer(frame, template.spec.answer))


def empty_answer(template: Template) -> pl.DataFrame:
    return pl.DataFrame({c: [] for c in ["value", *template.spec.answer.records]})


def swapped_twin(
    template: Template,
    task: CleanTask,
    changed: dict[str, Any],
    inspect: dict[str, Any],
    guard: tuple[str, str, Any] | None = None,
) -> NoisyTwin:
    """Abstain twin whose reference is the gold program with the changed slots. With `guard` = (table,
    column, value), both references also abstain unless the concept `value`, in any spelling, occurs in
    `table.column` (the careful reader's dictionary look-up, which a count template otherwise answers with 0)."""
    slots = typed_slots(template, {**task.slots, **changed})
    sql, gold = render_sql(template.gold_sql, slots).strip(), load_python_program(template)
    if guard is None:
        reference_python = gold
    else:
        table, column, value = guard
        known_sql = f"SELECT 1 FROM {table} WHERE {concept_sql(column)} = {sql_literal(concept_key(value))}"
        sql = f"SELECT g.* FROM (\n{sql}\n) g\nWHERE EXISTS ({known_sql})"

        def reference_python(tables, slots):
            # a dictionary look-up: over the whole table, even when the question is about one patient
            known = tables.whole()[table].filter(concept_is(column, value)).select(pl.len()).collect().item()
            return gold(tables, slots) if known else empty_answer(template)

    return NoisyTwin(
        patch=Patch(slots=changed),
        contract="abstain",
        expected=AnswerValue(value=None),
        reference_sql=sql,
        reference_python=reference_python,
        inspect=inspect,
    )
