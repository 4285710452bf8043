"""Concept identity: one normal form for clinical concept names, the same in Python, polars and SQL.

A concept slot (a drug, lab or chart item, organism, route, care unit...) names a concept, not a byte string:
'LaMOTrigine', 'LamoTRIgine' and 'lamotrigine ' are one drug. Two names are one concept when their keys are
equal: the rewrites of `concepts.yaml` (whitespace runs to one space, hyphen runs to one hyphen, no surrounding
space) then case folding (tall-man lettering is a case pattern, so folding covers it). Gold SQL, gold Python,
every noise sub-type and every guard compare concepts through these functions; questions show `display_name`.
The same file declares which eMAR events document an administration and which tables record each concept.

>>> concept_key("  OxycoDONE (Immediate Release) ")
'oxycodone (immediate release)'
>>> concept_key("OxyCODONE--Acetaminophen") == concept_key("Oxycodone-Acetaminophen")
True
>>> display_name("OxycoDONE  (Immediate Release) ")
'Oxycodone (Immediate Release)'
>>> display_name("NIFEdipine ER"), display_name("Potassium mL pH"), display_name("OxyCODONE SR (OxyconTIN)")
('Nifedipine ER', 'Potassium mL pH', 'Oxycodone SR (Oxycontin)')
>>> display_name("NTproBNP", tall_man=False)
'NTproBNP'
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any, overload

import polars as pl
import yaml

from pipeline.db import source_fact

DECLARATIONS = Path(__file__).with_name("concepts.yaml")
# A tall-man word mixes one run of two or more capitals with runs of small letters (hydrOXYzine, NIFEdipine,
# OxyconTIN); short units and abbreviations (mL, pH, IgG) are not tall-man and keep their case.
_TALL_MAN = re.compile(r"^(?=[A-Za-z]{6,}$)(?=.*[A-Z]{2})(?=.*[a-z]{2})(?!.*[A-Z]{2}.*[a-z].*[A-Z]{2})")
_LETTERS = re.compile(r"[A-Za-z]+")


@cache
def declarations() -> dict[str, Any]:
    """The parsed concepts.yaml."""
    return yaml.safe_load(DECLARATIONS.read_text())


@cache
def _rules() -> tuple[tuple[re.Pattern, str], ...]:
    return tuple((re.compile(pattern), replacement) for pattern, replacement in declarations()["key_rules"])


def _cleaned(name: Any) -> str:
    text = str(name)
    for pattern, replacement in _rules():
        text = pattern.sub(replacement, text)
    return text


@overload
def concept_key(name: None) -> None: ...
@overload
def concept_key(name: str) -> str: ...
@overload
def concept_key(name: Any) -> str | None: ...
def concept_key(name: Any) -> str | None:
    """The comparable form of a concept name (None stays None)."""
    return None if name is None else _cleaned(name).lower()


def concept_expr(column: str | pl.Expr) -> pl.Expr:
    """The same key as a polars expression over a text column."""
    expr = pl.col(column) if isinstance(column, str) else column
    for pattern, replacement in _rules():
        expr = expr.str.replace_all(pattern.pattern, replacement)
    return expr.str.to_lowercase()


def concept_is(column: str | pl.Expr, name: Any) -> pl.Expr:
    """polars: the column names the same concept as `name` (the gold Python form of a concept slot filter)."""
    return concept_expr(column) == concept_key(name)


def concept_sql(expression: str) -> str:
    """The same key as a DuckDB expression over a SQL expression (a column or a quoted literal)."""
    for pattern, replacement in _rules():
        expression = f"regexp_replace({expression}, '{pattern.pattern}', '{replacement}', 'g')"
    return f"lower({expression})"


def same_concept(a: Any, b: Any) -> bool:
    """Two names of one concept."""
    return a is not None and b is not None and concept_key(a) == concept_key(b)


def display_name(name: Any, tall_man: bool = True) -> str | None:
    """A name as a question shows it: key rewrites without case folding; with `tall_man`, tall-man words in
    ordinary capitalisation."""
    if name is None:
        return None
    text = _cleaned(name)
    return (
        _LETTERS.sub(lambda m: m.group().capitalize() if _TALL_MAN.match(m.group()) else m.group(), text)
        if tall_man
        else text
    )


def display_value(vocabulary: str | None, name: Any) -> Any:
    """A concept slot's value as questions show it (tall-man folding only for vocabularies declared to use it)."""
    if vocabulary is None or not isinstance(name, str):
        return name
    return display_name(name, tall_man=vocabulary in declarations()["tall_man_vocabularies"])


def administration_events() -> tuple[str, ...]:
    """eMAR event_txt values documenting a dose given (concepts.yaml says why each is in or out)."""
    return tuple(declarations()["administration_events"])


def administered_expr(column: str | pl.Expr = "event_txt") -> pl.Expr:
    """polars: the eMAR event documents an administration."""
    return concept_expr(column).is_in([concept_key(e) for e in administration_events()])


def administered_sql(expression: str = "event_txt") -> str:
    """DuckDB: the eMAR event documents an administration (`{{ administered('e.event_txt') }}` in templates)."""
    keys = ", ".join("'" + concept_key(e).replace("'", "''") + "'" for e in administration_events())
    return f"{concept_sql(expression)} IN ({keys})"


def concept_records(vocabulary: str) -> list[dict[str, Any]]:
    """Every table recording the concepts of a vocabulary for an encounter (empty when none is declared)."""
    return list(declarations()["concept_records"].get(vocabulary, []))


def unlinked_time(table: str) -> str | None:
    """The time column by which a row of `table` without an admission is found for one (None: not declared)."""
    return declarations().get("unlinked_times", {}).get(table)


def column_keys(con, table: str, column: str) -> frozenset[str]:
    """The concept keys a column of the source names (distinct values keyed in Python, once per database file,
    table and column: the source is read-only, and a key per distinct name beats a regex per row per look-up)."""

    def keys(source: str) -> frozenset[str]:
        sql = f'SELECT DISTINCT "{column}" FROM {source}"{table}" WHERE "{column}" IS NOT NULL'
        names = con.execute(sql).fetchall()
        return frozenset(concept_key(name) for (name,) in names)

    return source_fact(con, ("column_keys", table, column), keys)
