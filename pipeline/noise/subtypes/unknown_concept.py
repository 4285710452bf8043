"""unknown_concept (query level): the question names a lab, drug or item that is in no dictionary; abstain.

The concept slot's value is changed by one deterministic typo-like edit (two letters swapped, one dropped or
doubled) until the name is absent from every dictionary column (concept_dictionaries.yaml), so a careless
reader may match it to the real concept. Names are compared as concepts (pipeline/concepts.py), in every
dictionary and in the slot's own vocabulary. Patient and population scope alike: the concept itself is gone,
so the careful reader, who looks the name up, abstains (even where the gold program would count 0).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

from pipeline.concepts import column_keys, concept_key
from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.slot_swap import concept_slots, swapped_twin, vocabulary
from pipeline.source.schema import load_schema

DICTIONARIES = Path(__file__).resolve().parents[1] / "concept_dictionaries.yaml"
MAX_TRIES = 6


@cache
def dictionary_columns() -> tuple[tuple[str, str], ...]:
    """(table, column) of every dictionary the schema has."""
    schema = load_schema()
    pairs = (entry.split(".") for entry in yaml.safe_load(DICTIONARIES.read_text()))
    return tuple((t, c) for t, c in pairs if t in schema and c in schema[t].column_names)


def in_any_dictionary(con, name: str, also: tuple[tuple[str, str], ...] = ()) -> bool:
    """Some dictionary (or a column in `also`) names the concept, in any spelling (pipeline/concepts.py)."""
    return any(concept_key(name) in column_keys(con, t, c) for t, c in (*dictionary_columns(), *also))


def misspell(name: str, rng) -> str:
    """`name` with one typo in a longer word (adjacent letters swapped, a letter dropped or doubled)."""
    words = list(re.finditer(r"[A-Za-z]{4,}", name))
    if not words:  # a short name (pH, INR): double one of its letters
        letters = [m.start() for m in re.finditer(r"[A-Za-z]", name)]
        if not letters:
            raise Rejected("concept_name_has_no_letters")
        i = letters[int(rng.integers(len(letters)))]
        return name[:i] + name[i] + name[i:]
    word = words[int(rng.integers(len(words)))]
    i = word.start() + int(rng.integers(1, len(word.group()) - 1))  # never the first or last letter
    edit = int(rng.integers(3))
    if edit == 0:
        return name[:i] + name[i + 1] + name[i] + name[i + 2:]
    if edit == 1:
        return name[:i] + name[i + 1:]
    return name[:i] + name[i] + name[i:]


@register
class UnknownConcept(NoiseSubtype):
    name = "unknown_concept"
    level = "query"
    version = 2  # 2: a made-up name is no case, spacing or tall-man variant of any dictionary name
    requires = "a concept slot (a text slot with a vocabulary: table.column)"

    def applies(self, template):
        return super().applies(template) and bool(concept_slots(template))

    def make(self, con, task, template, rng):
        slots = concept_slots(template)
        slot = slots[int(rng.integers(len(slots)))]
        clean, (table, column) = str(task.slots[slot]), vocabulary(template, slot)
        for _ in range(MAX_TRIES):
            candidate = misspell(clean, rng)
            known = in_any_dictionary(con, candidate, also=((table, column),))
            if concept_key(candidate) != concept_key(clean) and not known:
                return swapped_twin(template, task, {slot: candidate}, {"table": table, "filter": {column: candidate}},
                                    guard=(table, column, candidate))
        raise Rejected("no_unknown_spelling")
