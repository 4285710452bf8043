"""Query-level noise helpers: swap question slots, check the gold program finds nothing, build the twin."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from pipeline.concepts import concept_is, concept_key, concept_sql
from pipeline.noise.base import NoisyTwin, Rejected
from pipeline.noise.patch import Patch
from pipeline.noise.rules import fixes_unit
from pipeline.templates.answers import AnswerValue, canonical_answer, is_empty
from pipeline.templates.instantiate import CleanTask, typed_slots
from pipeline.templates.programs import load_python_program, run_sql
from pipeline.templates.render import render_sql, sql_literal
from pipeline.templates.spec import Template

ENTITY_SLOTS = ("subject_id", "hadm_id", "stay_id")
CONCEPT_UNITS = Path(__file__).resolve().parent / "concept_units.yaml"


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
    answer_unit: str | None = None,
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
        answer_unit=answer_unit,
    )


@cache
def concept_units() -> dict[str, dict[str, str]]:
    return yaml.safe_load(CONCEPT_UNITS.read_text())


def swapped_unit(
    con, template: Template, task: CleanTask, changed: dict[str, Any], known: dict[str, str] | None = None
) -> str | None:
    """The unit the changed concept's results come in (its rows' most frequent; `known`: names the record does not
    hold), where the answer carries its row's unit; None where the answer's unit is fixed, named by a slot of the
    question, or there is none.
    Rejected when the concept has no unit to show: its format would keep the asked concept's (a tell)."""
    if template.spec.answer.unit is not None or task.answer.unit is None or fixes_unit(template):
        return None  # a fixed unit, none, or one the question itself names ("dosed in mg"; blind audit 42)
    for slot, name in changed.items():
        rule = concept_units().get(slot)
        if rule is None:
            continue
        unit = rule["unit"]
        found = con.execute(
            f"SELECT {unit} FROM {rule['rows']} WHERE {concept_sql(rule['name'])} = {concept_sql('?')} "
            f"AND {unit} IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1",
            [name],
        ).fetchall()
        shown = found[0][0] if found else (known or {}).get(name)
        if shown is None:
            raise Rejected("no_unit_for_concept")
        return shown
    return None


def showable_units(
    con, template: Template, task: CleanTask, slot: str, names: Sequence, known: dict[str, str] | None = None
) -> dict[Any, str | None]:
    """{name: the unit its question shows} for the names that have one to show (all of them, with None, where the
    answer's unit is fixed or there is none), in the names' order."""
    units = {}
    for name in names:
        try:
            units[name] = swapped_unit(con, template, task, {slot: name}, known)
        except Rejected:
            continue
    return units
