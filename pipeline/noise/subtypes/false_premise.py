"""false_premise (query level): the question presupposes an event the patient never had; abstain.

The concept slot (one with a `vocabulary`) takes a concept that other records hold but this patient's
admission / stay does not; concepts the same patient has in another encounter come first (a careless reader
may answer from there). Concepts are compared as concepts (pipeline/concepts.py): a candidate is used only
when no table recording that kind of concept (`concept_records` in pipeline/concepts.yaml: for a drug its
prescriptions, pharmacy and eMAR rows) names it, in any spelling, for the encounter, and no name the encounter
records is its kin (false_premise.yaml: a shared word root across the lab and chart dictionaries, Monos ~
Monocytes). A template without a
concept slot swaps its admission for another admission of the same patient in which the asked event never
happened. Either way the gold program must find nothing.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import yaml

from pipeline.concepts import concept_key, concept_records, display_value, unlinked_time
from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.encounters import lead_of
from pipeline.noise.slot_swap import (
    ENTITY_SLOTS,
    concept_slots,
    gold_finds_nothing,
    showable_units,
    swapped_twin,
    vocabulary,
)
from pipeline.source.schema import load_schema
from pipeline.templates.render import render_sampler
from pipeline.templates.spec import AnswerType

MAX_TRIES = 8  # candidate values tried with the gold program (each costs one gold query)
MAX_CANDIDATES = 40  # candidate values looked up in the record tables (one cheap indexed query each)


@register
class FalsePremise(NoiseSubtype):
    name = "false_premise"
    level = "query"
    version = 6  # 6: the answer format shows the named concept's usual unit (concept_units.yaml)
    # 5: no candidate kin to a name the encounter records (false_premise.yaml; blind audit 26 read
    # "Monos", a body-fluid item, as the patient's blood Monocytes, charted as "Differential-Monos");
    # 2: concepts compared as concepts; the premise is false in every table recording the concept;
    # 3: not on counts and lists (zero and none are answers); 4: rows without an admission in its time count for it
    requires = (
        "a patient-level, non-count, non-list template with a concept slot (one with a vocabulary) "
        "or both subject_id and hadm_id"
    )

    def applies(self, template):
        """Listed, patient-level, with a concept or admission to swap, and an answer that presupposes the event:
        a count (0), a list (none) or a yes/no question that does not presuppose it (no) is answered by its
        absence, so only value questions and a template's presupposing booleans are listed."""
        slots = template.spec.slots
        answered_by_absence = template.spec.answer.type in (AnswerType.count, AnswerType.list)
        return (
            super().applies(template)
            and template.spec.scope.value == "patient"
            and not answered_by_absence
            and (bool(concept_slots(template)) or {"subject_id", "hadm_id"} <= set(slots))
        )

    def make(self, con, task, template, rng):
        concepts = concept_slots(template)
        if not concepts:
            return _swap(con, task, template, "hadm_id", _other_admissions(con, task), ("admissions", "hadm_id"))
        slot = concepts[int(rng.integers(len(concepts)))]
        source = template.spec.slots[slot].vocabulary
        if not concept_records(source):
            raise Rejected("no_declared_concept_records")
        candidates = _concept_candidates(con, task, template, slot, rng)[:MAX_CANDIDATES]
        recorded = recorded_concepts(con, task, source)
        false_everywhere = [v for v in candidates if concept_key(v) not in recorded]
        if candidates and not false_everywhere:
            raise Rejected("premise_recorded_for_encounter")
        kin = recorded_roots(con, task, source)
        unrelated = [v for v in false_everywhere if not roots(v) & kin]
        if false_everywhere and not unrelated:
            raise Rejected("premise_has_recorded_kin")
        return _swap(con, task, template, slot, unrelated, vocabulary(template, slot))


def _swap(con, task, template, slot, candidates, inspected):
    """The twin for the first candidate with a unit to show (where the answer shows its row's) that the gold
    program answers nothing for."""
    units = showable_units(con, template, task, slot, candidates[:MAX_TRIES])
    if candidates and not units:
        raise Rejected("no_unit_for_concept")
    for value, unit in units.items():
        if gold_finds_nothing(con, template, task, {slot: value}):
            table, column = inspected
            return swapped_twin(
                template, task, {slot: value}, {"table": table, "filter": {column: value}}, answer_unit=unit
            )
    raise Rejected("gold_answers_every_candidate" if candidates else "no_candidate_value")


def recorded_in(con, task, source: str, value) -> str | None:
    """The first table (concept_records of the `source` vocabulary) naming the concept `value`, in any spelling,
    for the task's encounter (its subject_id, hadm_id and stay_id where the table has them); None if none."""
    return recorded_concepts(con, task, source).get(concept_key(value))


def recorded_concepts(con, task, source: str) -> dict[str, str]:
    """{concept key: the first table recording it} for the task's encounter: one query per recording table
    (distinct names of the encounter's rows, keyed in Python) instead of one per candidate and table."""
    schema, found = load_schema(), dict[str, str]()
    for record in concept_records(source):
        table = record["table"]
        entity = [s for s in ENTITY_SLOTS if s in task.slots and s in schema[table].column_names]
        where = " AND ".join([_entity_sql(table, s) for s in entity]) or "TRUE"
        join = f" JOIN {record['via']} d USING ({', '.join(record['keys'])})" if "via" in record else ""
        params = [task.slots[s] for s in entity for _ in range(_entity_sql(table, s).count("?"))]
        names = con.execute(
            f"SELECT DISTINCT {_name_column(record)} FROM {table} t{join} WHERE {where}", params
        ).fetchall()
        for (name,) in names:
            found.setdefault(concept_key(name), table)
    return found


@cache
def kin_rules() -> dict[str, Any]:
    """false_premise.yaml: which vocabularies' names are read as kin, and how."""
    return yaml.safe_load(resources.files(__package__).joinpath("false_premise.yaml").read_text())


def roots(name: Any) -> set[str]:
    """What a reader matches a name by (false_premise.yaml): the leading letters of its significant words, its
    short words as abbreviations, and its words' initials as one ('Differential-Monos' -> {'mono', '#dm'}; 'White
    Blood Cells' and 'WBC' share '#wbc')."""
    rules = kin_rules()
    prefix, qualifiers, (shortest, longest) = rules["prefix"], set(rules["qualifiers"]), rules["abbreviation_letters"]
    words = re.findall(r"[a-z]+", concept_key(name) or "")
    found = {w[:prefix] for w in words if len(w) >= prefix and w not in qualifiers}
    found |= {f"#{w}" for w in words if shortest <= len(w) <= longest}
    if shortest <= len(words) <= longest:
        found.add("#" + "".join(w[0] for w in words))
    return found


def recorded_roots(con, task, source: str) -> set[str]:
    """The roots of every name the task's encounter records in the kin vocabularies of `source` (none declared:
    no kin check)."""
    return {
        root
        for kin in kin_rules()["kin_vocabularies"].get(source, [])
        for key in recorded_concepts(con, task, kin)
        for root in roots(key)
    }


def _entity_sql(table: str, slot: str) -> str:
    """t.<slot> = ?; for an admission, also the patient's rows without one dated within its days (an ED lab; the
    lead before admittime as in pipeline/noise/encounters.py; whole days, so a doubtful row counts)."""
    time = unlinked_time(table) if slot == "hadm_id" else None
    if time is None:
        return f"t.{slot} = ?"
    return (
        f"(t.hadm_id = ? OR (t.hadm_id IS NULL AND EXISTS (SELECT 1 FROM admissions a WHERE a.hadm_id = ? "
        f"AND a.subject_id = t.subject_id AND CAST(t.{time} AS DATE) BETWEEN "
        f"CAST(a.admittime - INTERVAL {lead_of(table)} HOUR AS DATE) AND CAST(a.dischtime AS DATE))))"
    )


def _name_column(record: dict) -> str:
    return f"d.{record['column']}" if "via" in record else f"t.{record['column']}"


def _concept_candidates(con, task, template, slot, rng) -> list:
    """Concepts of `slot` in the sampler, in display form, absent for this task's entity: the patient's own
    (other encounters) first, each group shuffled."""
    entity = [s for s in ENTITY_SLOTS if s in task.slots]
    source = template.spec.slots[slot].vocabulary
    sampler = f"({render_sampler(template.spec.sampler)}) s"
    patient = con.sql(
        f"SELECT DISTINCT {', '.join(entity)}, {slot} AS v FROM {sampler} WHERE subject_id = ? ORDER BY ALL",
        params=[task.slots["subject_id"]],
    ).pl()
    mine = {concept_key(v) for v in patient.filter(*(patient[s] == task.slots[s] for s in entity))["v"].to_list()}
    mine.add(concept_key(task.slots[slot]))
    same_patient = _one_per_concept(patient["v"].drop_nulls().to_list(), source, mine)
    everyone = [
        r[0]
        for r in con.execute(f"SELECT DISTINCT {slot} FROM {sampler} WHERE {slot} IS NOT NULL ORDER BY 1").fetchall()
    ]
    others = _one_per_concept(everyone, source, mine | {concept_key(v) for v in same_patient})
    rng.shuffle(same_patient)
    rng.shuffle(others)
    return same_patient + others


def _one_per_concept(values: list, source: str, exclude: set) -> list:
    """The values' concepts, sorted, each once, in display form, leaving out the `exclude` keys."""
    kept: dict = {}
    for value in sorted(values):
        kept.setdefault(concept_key(value), display_value(source, value))
    return [shown for key, shown in kept.items() if key not in exclude]


def _other_admissions(con, task) -> list:
    """Other admissions of the same patient (the question then asks about an event that one never had)."""
    rows = con.execute(
        "SELECT hadm_id FROM admissions WHERE subject_id = ? AND hadm_id <> ? ORDER BY hadm_id",
        [task.slots["subject_id"], task.slots["hadm_id"]],
    ).fetchall()
    return [r[0] for r in rows]
