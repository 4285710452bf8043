"""unknown_concept (query level): the question names a real lab, drug, organism, unit... the record does not know.

The concept slot's value is replaced by a real-world name of the same kind from a catalogue
(pipeline/noise/unknown_concepts.yaml: a lab for a lab, an ICU for an ICU, written the way the record writes that kind)
that this database does not know: its concept (pipeline/concepts.py) is in no dictionary column
(concept_dictionaries.yaml) nor in the slot's vocabulary, and it is not `close` to any name of that kind the database
holds (no typo, no part or whole of a known name, and one of its words finds nothing in an ILIKE search). A careful
reader who looks the name up finds nothing to map it to and abstains, with patient and population scope alike; only
value questions (and yes/no questions that presuppose the concept) are listed: a count (0), a list (none) or a plain
yes/no (no) over a concept the record does not have is answered by its absence. A typo of a real name is not this noise:
the careful reader recognises it and answers (the first blind audit's finding), so no catalogue name close to a known
name is ever chosen. Code dictionaries (ICD titles, HCPCS) have no catalogue: every clinical name has a coded synonym.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from pipeline.concepts import column_keys, concept_key
from pipeline.db import source_fact
from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.slot_swap import concept_slots, showable_units, swapped_twin, vocabulary
from pipeline.source.schema import load_schema
from pipeline.templates.spec import AnswerType

DICTIONARIES = Path(__file__).resolve().parents[1] / "concept_dictionaries.yaml"
CATALOGUE = Path(__file__).resolve().parents[1] / "unknown_concepts.yaml"
MIN_EDITS, LETTERS_PER_EDIT, MIN_WORD = 2, 8, 4  # closeness thresholds (see `close`)


class CatalogueEntry(BaseModel):
    """One vocabulary's unknown names (a list, or by slot name) and the columns they are compared with."""

    model_config = ConfigDict(extra="forbid")
    compare_with: list[str]
    names: list[str] | dict[str, list[str]]
    units: dict[str, str] = {}  # name -> the unit its results come in (concept_units.yaml)


@cache
def catalogue() -> dict[str, CatalogueEntry]:
    return {vocab: CatalogueEntry(**entry) for vocab, entry in yaml.safe_load(CATALOGUE.read_text()).items()}


def catalogue_names(vocab: str, slot: str) -> tuple[str, ...]:
    """The catalogue's names for a slot of the vocabulary `table.column` (none when it has no entry)."""
    entry = catalogue().get(vocab)
    names = () if entry is None else entry.names
    return tuple(names.get(slot, ()) if isinstance(names, dict) else names)


def _existing(columns) -> tuple[tuple[str, str], ...]:
    schema = load_schema()
    pairs = (entry.split(".") for entry in columns)
    return tuple((t, c) for t, c in pairs if t in schema and c in schema[t].column_names)


@cache
def dictionary_columns() -> tuple[tuple[str, str], ...]:
    """(table, column) of every dictionary the schema has."""
    return _existing(yaml.safe_load(DICTIONARIES.read_text()))


def in_any_dictionary(con, name: str, also: tuple[tuple[str, str], ...] = ()) -> bool:
    """Some dictionary (or a column in `also`) names the concept, in any spelling (pipeline/concepts.py)."""
    return any(concept_key(name) in column_keys(con, t, c) for t, c in (*dictionary_columns(), *also))


def known_keys(con, vocab: str) -> list[str]:
    """Concept keys of the names a reader would map a name of this vocabulary to: its column and its kin."""
    entry = catalogue().get(vocab)
    columns = _existing([vocab, *(entry.compare_with if entry else [])])
    return sorted(set().union(*(column_keys(con, t, c) for t, c in columns)))


def close(con, candidates: Sequence[str], known: Sequence[str]) -> dict[str, str]:
    """The candidates close to a known name, each with the reason. Names are compared as concept keys:
    - typo: their letters and digits are within max(2, longer length // 8) edits (DuckDB levenshtein);
    - part: the candidate's words are a run of a known name's words, or a known name with a word of 4+ letters
      is a run of the candidate's words ('Vancomycin' ~ 'Vancomycin Oral Liquid');
    - searchable: every word of 4+ letters of the candidate occurs inside some known name, so the reader's
      ILIKE '%word%' finds a lead for each (a candidate without such a word is close too)."""
    keys = {name: concept_key(name) for name in candidates}
    runs = [f" {' '.join(_words(k))} " for k in known]
    runs_long = [r for r in runs if any(len(w) >= MIN_WORD for w in r.split())]
    typos = _typos(con, sorted(set(keys.values())), known)
    text, reasons = "\n".join(known), {}
    for name, key in keys.items():
        run, long_words = f" {' '.join(_words(key))} ", [w for w in _words(key) if len(w) >= MIN_WORD]
        if key in typos:
            reasons[name] = "typo"
        elif any(run in r for r in runs) or any(r in run for r in runs_long):
            reasons[name] = "part"
        elif all(w in text for w in long_words):
            reasons[name] = "searchable"
    return reasons


def _words(key: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", key)


def _typos(con, keys: list[str], known: Sequence[str]) -> set[str]:
    """The keys within the typo distance of some known key (compact forms: letters and digits only)."""
    if not keys or not known:
        return set()
    rows = con.execute(
        "WITH c AS (SELECT k, regexp_replace(k, '[^a-z0-9]', '', 'g') AS s FROM unnest(?::VARCHAR[]) t(k)), "
        "n AS (SELECT regexp_replace(k, '[^a-z0-9]', '', 'g') AS s FROM unnest(?::VARCHAR[]) t(k)), "
        "p AS (SELECT c.k, c.s AS a, n.s AS b, greatest(?, greatest(length(c.s), length(n.s)) // ?) AS m "
        "FROM c, n WHERE abs(length(c.s) - length(n.s)) <= greatest(?, greatest(length(c.s), length(n.s)) // ?)) "
        "SELECT DISTINCT k FROM p WHERE levenshtein(a, b) <= m ORDER BY k",
        [keys, list(known), MIN_EDITS, LETTERS_PER_EDIT, MIN_EDITS, LETTERS_PER_EDIT],
    ).fetchall()
    return {k for (k,) in rows}


def unknown_names(con, vocab: str, slot: str, names: Sequence[str] | None = None) -> tuple[str, ...]:
    """The names (default: the catalogue's for the slot) that the database does not know and that are not close
    to a name of that kind it knows, sorted. The catalogue's answer is kept per database file, like column_keys."""
    if names is None:
        return source_fact(con, ("unknown_names", vocab, slot), lambda _: _unknown(con, vocab, slot, None))
    return _unknown(con, vocab, slot, names)


def _unknown(con, vocab: str, slot: str, names: Sequence[str] | None) -> tuple[str, ...]:
    table, column = vocab.split(".")
    absent = [
        n
        for n in (catalogue_names(vocab, slot) if names is None else names)
        if not in_any_dictionary(con, n, also=((table, column),))
    ]
    near = close(con, absent, known_keys(con, vocab)) if absent else {}
    return tuple(sorted(n for n in absent if n not in near))


@register
class UnknownConcept(NoiseSubtype):
    name = "unknown_concept"
    level = "query"
    # 4: the answer format shows the swapped-in name's unit (unknown_concepts.yaml `units`, concept_units.yaml;
    # blind audit 40: a cerebral oximetry asked in mmHg); a name without a unit is not swapped into such a question
    # 3: a real name of the same kind the record does not know, not close to any it knows (a typo of a real
    # name, v2, was recognised and answered by a careful analyst in the first blind audit)
    # (and no longer on counts and lists, answered by absence; nor on code dictionaries, which have no catalogue)
    version = 4
    requires = (
        "a value question (not a count or list) with a concept slot whose vocabulary has catalogue names "
        "(unknown_concepts.yaml; ICD titles and HCPCS descriptions have none)"
    )

    def applies(self, template):
        """A value question naming a concept: a count (0) or a list (none) over a concept the record does not have
        is answered by its absence, as false_premise's are; a yes/no question is listed only where it presupposes
        the concept (a susceptibility result), like false_premise's. Only slots the catalogue has names for."""
        answered_by_absence = template.spec.answer.type in (AnswerType.count, AnswerType.list)
        return super().applies(template) and not answered_by_absence and bool(_catalogued_slots(template))

    def make(self, con, task, template, rng):
        slots = _catalogued_slots(template)
        slot = slots[int(rng.integers(len(slots)))]
        table, column = vocabulary(template, slot)
        candidates = unknown_names(con, f"{table}.{column}", slot)
        if not candidates:
            raise Rejected("no_unknown_concept")
        units = showable_units(con, template, task, slot, candidates, catalogue()[f"{table}.{column}"].units)
        if not units:
            raise Rejected("no_unit_for_concept")  # every name would keep the asked concept's unit
        names = list(units)
        candidate = names[int(rng.integers(len(names)))]
        return swapped_twin(
            template,
            task,
            {slot: candidate},
            {"table": table, "filter": {column: candidate}},
            guard=(table, column, candidate),
            answer_unit=units[candidate],
        )


def _catalogued_slots(template) -> list[str]:
    """The template's concept slots whose vocabulary the catalogue has names for."""
    return [slot for slot in concept_slots(template) if catalogue_names(".".join(vocabulary(template, slot)), slot)]
