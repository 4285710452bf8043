"""Turn a gold program's result frame into a typed answer, and compare two answers deterministically."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict

from pipeline.templates.spec import Answer, AnswerType

NUMBER_EPSILON = 1e-9  # floating-point slack on top of a template's tolerance


class AnswerShapeError(ValueError):
    """The frame does not have the shape the answer type needs (the reason is a drop reason)."""


class AnswerValue(BaseModel):
    """A typed answer: value (None = the record does not support one), unit and the associated records."""

    model_config = ConfigDict(extra="forbid")
    value: Any
    unit: str | None = None
    records: dict[str, Any] = {}


class AnswerFormat(BaseModel):
    """Agent-visible: what an answer must hold (a task's scored parts, and nothing the question does not ask)."""

    model_config = ConfigDict(extra="forbid")
    type: AnswerType
    unit: str | None = None  # the unit the value is to be given in (a value without a unit is read in it)
    ordered: bool = False  # lists: the order matters
    records: list[str] = []  # the associated record fields the question asks for

    def describe(self) -> str:
        """One line for a prompt or a tool description."""
        kind = {
            AnswerType.list: "a list" + (" in order" if self.ordered else " (any order)"),
            AnswerType.count: "a whole number (a count)",
            AnswerType.boolean: "true or false",
            AnswerType.datetime: "a date or date-time (ISO 8601)",
        }.get(self.type, f"a {self.type.value}")
        parts = [f"value: {kind}" + (f" in {self.unit}" if self.unit else "")]
        if self.records:
            parts.append(f"records: {{{', '.join(self.records)}}}")
        return "; ".join(parts) + "; value null when the record does not support an answer"


def answer_format(spec: Answer, clean_answer: AnswerValue) -> AnswerFormat:
    """A task's answer format from its template's Answer spec and the clean answer's unit (both tasks of a pair
    show the same format, so the format tells nothing about the condition)."""
    return AnswerFormat(
        type=spec.type, unit=spec.unit or clean_answer.unit, ordered=spec.ordered, records=list(spec.asked_records)
    )


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _scalar(value: Any, answer_type: AnswerType) -> Any:
    value = _plain(value)
    if value is None:
        return None
    if answer_type is AnswerType.number:
        return float(value)
    if answer_type is AnswerType.count:
        return int(value)
    if answer_type is AnswerType.boolean:
        return bool(value)
    return str(value)


def canonical_answer(frame: pl.DataFrame | pl.LazyFrame, spec: Answer) -> AnswerValue:
    """Scalar types take exactly one row; lists take every row (sorted unless ordered)."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    if frame.height == 0 and spec.type is not AnswerType.list:
        return AnswerValue(value=None, unit=spec.unit)  # no row, no answer: the columns do not matter
    if "value" not in frame.columns:
        raise AnswerShapeError(f"result has no 'value' column (columns: {frame.columns})")
    missing = [c for c in spec.records if c not in frame.columns]
    if missing:
        raise AnswerShapeError(f"result lacks record column(s) {missing}")
    if spec.type is AnswerType.list:
        plain = [_plain(v) for v in frame["value"].to_list()]
        values = [_scalar(v, AnswerType.text if isinstance(v, str) else AnswerType.number) for v in plain]
        values = [v for v in values if v is not None]
        return AnswerValue(value=values if spec.ordered else sorted(values, key=repr), unit=spec.unit)
    if frame.height > 1:
        raise AnswerShapeError(f"expected one row for a {spec.type.value} answer, got {frame.height}")
    row = frame.row(0, named=True)
    unit = spec.unit if spec.unit is not None else _plain(row.get("unit"))
    records = {c: _plain(row[c]) for c in spec.records}
    return AnswerValue(value=_scalar(row["value"], spec.type), unit=unit, records=records)


def first_reading(frame: pl.DataFrame | pl.LazyFrame, spec: Answer) -> AnswerValue:
    """What a careless reader takes from a result: the canonical answer, or where a one-value question gets several
    rows (a record kept twice), the first of them, rows ordered by every column so that the pick is the same
    whatever order the engine returned them in."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    if spec.type is not AnswerType.list and frame.height > 1:
        frame = frame.sort(frame.columns, nulls_last=True).head(1)
    return canonical_answer(frame, spec)


def answers_agree(a: AnswerValue, b: AnswerValue, spec: Answer) -> bool:
    """Equal values (numbers within the tolerance, as the verifier matches them: two means rounded to 2 decimals
    one rounding step apart agree at tolerance 0.01), units and records."""
    if a.unit != b.unit or a.records != b.records:
        return False
    if spec.type is AnswerType.number and a.value is not None and b.value is not None:
        return abs(a.value - b.value) <= spec.tolerance + NUMBER_EPSILON
    if spec.type is AnswerType.list and spec.ordered is False:
        return sorted(a.value, key=repr) == sorted(b.value, key=repr)
    return a.value == b.value


def is_empty(answer: AnswerValue) -> bool:
    return answer.value is None or answer.value == []
