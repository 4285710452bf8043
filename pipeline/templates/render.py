"""Render question texts and SQL with Jinja2; slot values enter SQL only as typed literals."""

from __future__ import annotations

import datetime as dt
from functools import cache, lru_cache

import jinja2

from pipeline.concepts import administered_sql, concept_sql


def sql_literal(value: object) -> str:
    """A value as a DuckDB literal (strings quoted and escaped; no raw text reaches the SQL)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return "'" + str(value).replace("'", "''") + "'"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
    # `{{ concept(d.label) }} = {{ concept(lab_label) }}` compares concept names (pipeline.concepts) in SQL
    env.globals["concept"] = concept_sql
    # `{{ administered('e.event_txt') }}`: the eMAR event documents a dose given (pipeline/concepts.yaml)
    env.globals["administered"] = administered_sql
    return env


def render(text: str, slots: dict[str, object]) -> str:
    """Render a Jinja2 text with the slots; an undefined slot raises jinja2.UndefinedError."""
    return compiled(text).render(**slots)


@lru_cache(maxsize=8192)
def compiled(text: str) -> jinja2.Template:
    """A text compiled once (compiling costs ~1 ms; a build renders the same few hundred texts many times)."""
    return environment().from_string(text)


def render_sampler(text: str) -> str:
    """Render a sampler query: no slots, only the globals (`{{ administered('event_txt') }}`)."""
    return render(text, {})


def render_sql(text: str, slots: dict[str, object]) -> str:
    """Render SQL: every slot is available only as its SQL literal (`{{ subject_id }}` is already quoted)."""
    return render(text, {name: sql_literal(value) for name, value in slots.items()})
