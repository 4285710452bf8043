"""Concept identity: one normal form for clinical concept names, the same in Python, polars and SQL.

A concept slot (a drug, lab or chart item, organism, route, care unit...) names a concept, not a byte string:
'LaMOTrigine', 'LamoTRIgine' and 'lamotrigine ' are one drug. Two names are one concept when their keys are
equal: case folded, surrounding whitespace dropped, inner runs of whitespace collapsed to one space (tall-man
lettering is a case pattern, so case folding covers it). Gold SQL, gold Python, every noise sub-type and every
guard compare concepts through these functions; questions show `display_name`.

>>> concept_key("  OxycoDONE (Immediate Release) ")
'oxycodone (immediate release)'
>>> display_name("OxycoDONE  (Immediate Release) ")
'Oxycodone (Immediate Release)'
>>> display_name("NIFEdipine ER"), display_name("Potassium mL pH")
('Nifedipine ER', 'Potassium mL pH')
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

_SPACES = re.compile(r"\s+")
# A tall-man word mixes a run of two or more capitals with a run of two or more small letters (hydrOXYzine,
# NIFEdipine); short units and abbreviations (mL, pH, IgG) are not tall-man and keep their case.
_TALL_MAN = re.compile(r"^(?=\w{6,}$)(?=.*[A-Z]{2})(?=.*[a-z]{2})[A-Za-z]+$")


def concept_key(name: Any) -> str | None:
    """The comparable form of a concept name (None stays None)."""
    if name is None:
        return None
    return _SPACES.sub(" ", str(name)).strip().lower()


def concept_expr(column: str | pl.Expr) -> pl.Expr:
    """The same key as a polars expression over a text column."""
    expr = pl.col(column) if isinstance(column, str) else column
    return expr.str.replace_all(r"\s+", " ").str.strip_chars().str.to_lowercase()


def concept_sql(expression: str) -> str:
    """The same key as a DuckDB expression over a SQL expression (a column or a quoted literal)."""
    return f"lower(trim(regexp_replace({expression}, '\\s+', ' ', 'g')))"


def same_concept(a: Any, b: Any) -> bool:
    """Two names of one concept."""
    return a is not None and b is not None and concept_key(a) == concept_key(b)


def display_name(name: Any) -> str | None:
    """A name as a question shows it: whitespace cleaned, tall-man words in ordinary capitalisation."""
    if name is None:
        return None
    words = _SPACES.sub(" ", str(name)).strip().split(" ")
    return " ".join(w.capitalize() if _TALL_MAN.match(w) else w for w in words)
