"""`relaxing`: the careless agent. Literal first; when that finds nothing, it relaxes the question until one answers.

Relaxations, each tried through the sql tool in this order until the gold program returns a non-empty
answer: another admission / ICU stay of the same patient (a patient that does not exist: the nearest patient
id), the most similar existing name for a concept slot (the patient's own names first, then any; by
jaro_winkler_similarity in SQL), a wider time window, then an encounter swap together with a similar name.
It never checks values: whatever it finds is its answer (of several rows for one value, the first).
"""

from __future__ import annotations

import datetime as dt
import difflib
import itertools
import re
from collections.abc import Iterator
from typing import Any

from pipeline.agents import register
from pipeline.agents.base import Agent, AgentContext, is_empty
from pipeline.concepts import concept_records
from pipeline.source.schema import load_schema
from pipeline.templates.answers import AnswerValue
from pipeline.templates.render import sql_literal

MAX_RELAXATIONS = 24  # gold queries after the literal one (the episode's turn limit is 30 by default)
SIMILAR_NAMES = 3
WIDENINGS_DAYS = (1, 7, 30, 365)
# slot -> (table, ordering time) of the encounters a patient has
ENCOUNTERS = {"hadm_id": ("admissions", "admittime"), "stay_id": ("icustays", "intime")}


@register
class Relaxing(Agent):
    name = "relaxing"

    def act(self, episode, context: AgentContext, seed: int) -> None:
        answer = self.attempt(episode, context, context.slots)
        if is_empty(answer):
            for slots in itertools.islice(self.relaxations(episode, context), MAX_RELAXATIONS):
                answer = self.attempt(episode, context, slots)
                if not is_empty(answer) or episode.done:
                    break
        self.answer(episode, answer)

    def attempt(self, episode, context: AgentContext, slots: dict[str, Any]) -> AnswerValue:
        return self.canonical(
            self.sql(episode, context.render(context.template.gold_sql, slots)), context, careless=True
        )

    def relaxations(self, episode, context: AgentContext) -> Iterator[dict[str, Any]]:
        """Slot variants, single relaxations first, then an encounter swap combined with a similar name."""
        slots = context.slots
        encounters = self.other_encounters(episode, slots)
        names = self.similar_names(episode, context)
        yield from ({**slots, **e} for e in encounters)
        yield from ({**slots, **n} for n in names)
        yield from ({**slots, **w} for w in widened_windows(context))
        yield from ({**slots, **e, **n} for e, n in itertools.product(encounters, names))

    def other_encounters(self, episode, slots: dict[str, Any]) -> list[dict[str, Any]]:
        """Other admissions / stays of the patient, latest first; for an unknown patient, the nearest patient ids."""
        subject, found = slots.get("subject_id"), []
        for slot, (table, time) in ENCOUNTERS.items():
            if slot in slots and subject is not None:
                frame = self.sql(
                    episode,
                    f"SELECT {slot} FROM {table} WHERE subject_id = {sql_literal(subject)} "
                    f"AND {slot} <> {sql_literal(slots[slot])} ORDER BY {time} DESC, {slot}",
                )
                found += [{slot: v} for v in (frame[slot].to_list() if frame is not None and frame.height else [])]
        if subject is not None and not found:
            frame = self.sql(
                episode,
                f"SELECT subject_id FROM patients WHERE subject_id <> {sql_literal(subject)} "
                f"ORDER BY abs(subject_id - {sql_literal(subject)}), subject_id LIMIT 3",
            )
            found += [{"subject_id": v} for v in (frame["subject_id"].to_list() if frame is not None else [])]
        return found

    def similar_names(self, episode, context: AgentContext) -> list[dict[str, Any]]:
        """For each concept slot, the existing names most like the asked one: the patient's own first."""
        found, subject = [], context.slots.get("subject_id")
        for name, slot in sorted(context.template.spec.slots.items()):
            described = slot.description if re.fullmatch(r"[a-z_]+\.[a-z_]+", slot.description) else None
            where = slot.vocabulary or described
            if where is None or name not in context.slots or slot.type != "text":
                continue
            table, column = where.split(".")
            asked, names = str(context.slots[name]), []
            if subject is not None:
                for source, named in patient_names(where, table, column):
                    names += self.names_like(episode, source, named, asked, f"t.subject_id = {sql_literal(subject)}")
            names += [n for n in self.names_like(episode, f"{table} t", f"t.{column}", asked) if n not in names]
            found += [{name: v} for v in names]
        return found

    def names_like(self, episode, source: str, column: str, asked: str, where: str = "TRUE") -> list[str]:
        """The names in `column` of `source` (a FROM clause) most like the asked one."""
        base = f"FROM {source} WHERE {column} IS NOT NULL AND {column} <> {sql_literal(asked)} AND {where}"
        similarity = f"jaro_winkler_similarity(lower({column}), lower({sql_literal(asked)}))"
        frame = self.sql(
            episode,
            f"SELECT {column} AS name {base} GROUP BY {column} "
            f"ORDER BY {similarity} DESC, {column} LIMIT {SIMILAR_NAMES}",
        )
        if frame is not None:
            return frame["name"].to_list() if frame.height else []
        frame = self.sql(episode, f"SELECT DISTINCT {column} AS name {base} ORDER BY 1")  # no SQL similarity: Python
        names = frame["name"].to_list() if frame is not None and frame.height else []
        return difflib.get_close_matches(asked, names, n=SIMILAR_NAMES, cutoff=0.0)


def patient_names(where: str, table: str, column: str) -> list[tuple[str, str]]:
    """(FROM clause, name column) pairs that give a patient's own names of a vocabulary: the table itself where it
    has subject_id, else the tables recording its concepts through the dictionary (a lab's labevents rows)."""
    schema = load_schema()
    if "subject_id" in schema[table].column_names:
        return [(f"{table} t", f"t.{column}")]
    return [
        (f"{r['table']} t JOIN {r['via']} d USING ({', '.join(r['keys'])})", f"d.{r['column']}")
        for r in concept_records(where)
        if "via" in r and "subject_id" in schema[r["table"]].column_names
    ]


def widened_windows(context: AgentContext) -> Iterator[dict[str, Any]]:
    """The question's time window (window_start / window_end slots) widened on both sides."""
    slots = context.slots
    if "window_start" not in slots or "window_end" not in slots:
        return
    start, end = (dt.date.fromisoformat(str(slots[k])[:10]) for k in ("window_start", "window_end"))
    for days in WIDENINGS_DAYS:
        shift = dt.timedelta(days=days)
        yield {"window_start": (start - shift).isoformat(), "window_end": (end + shift).isoformat()}
