"""The one answer matcher: does a given answer score as the expected one under a template's Answer spec.

Numbers within the tolerance, lists as multisets unless ordered, text by normalised case and whitespace,
datetimes by instant, and only the record fields the question asks for (`answer.asked_records`). Units are
normalised through `pipeline/env/unit_aliases.yaml`; a number without a unit takes the expected unit, and one in
another unit of the same dimension is converted through `pipeline/env/unit_conversions.yaml` first. The verifier
scores episodes with it; the pair verifier asks it whether a careless reading would pass.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from functools import cache
from importlib import resources
from typing import Any

import yaml

from pipeline.templates.answers import NUMBER_EPSILON, AnswerValue, is_empty
from pipeline.templates.spec import Answer, AnswerType

_RECORD_TOLERANCE = 1e-6


def scores_as(given: AnswerValue, expected: AnswerValue, spec: Answer) -> bool:
    """`given` passes as `expected`; an empty answer (none, or an empty list) only as another empty one."""
    if is_empty(given) or is_empty(expected):
        return is_empty(given) and is_empty(expected) and (given.value is None) == (expected.value is None)
    return not answer_mismatches(expected, given, spec)


def answer_mismatches(expected: AnswerValue, got: AnswerValue, spec: Answer) -> list[str]:
    """What differs between the expected and the given answer (empty: they match)."""
    if got.value is None:
        return [f"answered NULL, but the record supports an answer: expected {expected.value!r}"]
    value, unit_problem = in_expected_unit(expected.unit, got, spec)
    reasons = [unit_problem] if unit_problem else []
    if not unit_problem and not _values_match(expected.value, value, spec):
        shown = f"{got.value!r}" if value is got.value else f"{got.value!r} {got.unit} (= {value:g} {expected.unit})"
        reasons.append(f"value {shown} does not match expected {expected.value!r}" + _tolerance_note(spec))
    for column in sorted(spec.asked_records):  # score only what is asked: labels keep the others as provenance
        value = expected.records.get(column)
        if column not in got.records:
            reasons.append(f"record {column!r} missing: expected {value!r}")
        elif not _same_scalar(value, got.records[column], _RECORD_TOLERANCE):
            reasons.append(f"record {column!r} is {got.records[column]!r}, expected {value!r}")
    return reasons


def between_readings(given: AnswerValue, readings: list[AnswerValue], spec: Answer) -> bool:
    """`given` lies among two or more defensible `readings` (empty ones aside): a number or count inside their
    range (within the tolerance), an ordered list each of whose places some reading of its length holds, an
    unordered list holding what every reading holds and nothing no reading holds. A careless answer between two
    readings a careful analyst may give is no wrong answer (blind audit 32: 87.18 between 87.15 and 87.23)."""
    readings = [r for r in readings if not is_empty(r)]
    if len(readings) < 2 or is_empty(given):
        return False
    if spec.type in (AnswerType.number, AnswerType.count):
        value = as_number(in_expected_unit(readings[0].unit, given, spec)[0])
        numbers = [n for n in (as_number(r.value) for r in readings) if n is not None]
        if value is None or len(numbers) < len(readings):
            return False
        slack = spec.tolerance + NUMBER_EPSILON
        return min(numbers) - slack <= value <= max(numbers) + slack
    if spec.type is not AnswerType.list or not isinstance(given.value, list):
        return False
    items = [_list_item(v) for v in given.value]
    lists = [[_list_item(v) for v in r.value] for r in readings if isinstance(r.value, list)]
    if spec.ordered:
        alike = [r for r in lists if len(r) == len(items)]
        return bool(alike) and all(any(r[i] == item for r in alike) for i, item in enumerate(items))
    held = set(items)
    return bool(lists) and set.intersection(*map(set, lists)) <= held <= set.union(*map(set, lists))


def in_expected_unit(unit: str | None, got: AnswerValue, spec: Answer) -> tuple[Any, str | None]:
    """The given value in the expected `unit`, or why it cannot be. No given unit takes the expected one (the
    task's answer format states it); a number in another unit of the same dimension is converted."""
    if unit is None or normal_unit(got.unit) is None or normal_unit(got.unit) == normal_unit(unit):
        return got.value, None
    if spec.type is not AnswerType.number:
        return got.value, f"unit {got.unit!r} does not match expected {unit!r}"
    converted = convert_unit(got.value, got.unit, unit)
    if converted is None:
        return got.value, f"unit {got.unit!r} cannot be converted to {unit!r}"
    return converted, None


def convert_unit(value: Any, unit: str | None, target: str | None) -> float | None:
    """`value` in `unit` expressed in `target` (unit_conversions.yaml); None: not a number, no unit, or not one
    dimension."""
    number, source, goal = as_number(value), _conversion(unit), _conversion(target)
    if number is None or source is None or goal is None or source[0] != goal[0]:
        return None
    base = number * source[1] + source[2]
    return (base - goal[2]) / goal[1]


@cache
def _unit_conversions() -> dict[str, tuple[str, float, float]]:
    """Canonical unit -> (dimension, scale, offset) from unit_conversions.yaml."""
    raw = yaml.safe_load(resources.files("pipeline.env").joinpath("unit_conversions.yaml").read_text())
    return {
        key: (dimension, float(size["scale"]), float(size.get("offset", 0.0)))
        for dimension, units in raw.items()
        for unit, size in units.items()
        if (key := normal_unit(unit)) is not None
    }


def _conversion(unit: str | None) -> tuple[str, float, float] | None:
    key = normal_unit(unit)
    return None if key is None else _unit_conversions().get(key)


def _tolerance_note(spec: Answer) -> str:
    return f" (tolerance {spec.tolerance})" if spec.type is AnswerType.number else ""


def _values_match(expected: Any, got: Any, spec: Answer) -> bool:
    kind = spec.type
    if kind is AnswerType.list:
        if not isinstance(got, list) or not isinstance(expected, list):
            return False
        left, right = [_list_item(v) for v in expected], [_list_item(v) for v in got]
        return left == right if spec.ordered else Counter(left) == Counter(right)
    if kind is AnswerType.number:
        a, b = as_number(expected), as_number(got)
        return a is not None and b is not None and abs(a - b) <= spec.tolerance + NUMBER_EPSILON
    if kind is AnswerType.count:
        a, b = as_number(expected), as_number(got)
        return a is not None and b is not None and a == b
    if kind is AnswerType.boolean:
        return _as_bool(expected) is not None and _as_bool(expected) == _as_bool(got)
    if kind is AnswerType.datetime:
        return _same_time(expected, got)
    return _normal_text(expected) == _normal_text(got)


def _same_scalar(expected: Any, got: Any, tolerance: float) -> bool:
    """Record values: numbers within the tolerance, datetimes by instant, other values as normalised text."""
    if expected is None or got is None:
        return expected is None and got is None
    a, b = as_number(expected), as_number(got)
    if a is not None and b is not None:
        return abs(a - b) <= tolerance
    if _as_time(expected) is not None:
        return _same_time(expected, got)
    return _normal_text(expected) == _normal_text(got)


def _list_item(value: Any) -> Any:
    number = as_number(value)
    return round(number, 6) if number is not None else _normal_text(value)


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return None if math.isnan(value) else float(value)
    try:
        return float(str(value).strip().replace(",", ""))
    except ValueError:
        return None


_TRUE, _FALSE = {"true", "yes", "1", "t", "y"}, {"false", "no", "0", "f", "n"}


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = _normal_text(value)
    return True if text in _TRUE else False if text in _FALSE else None


def _as_time(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    try:
        return dt.datetime.fromisoformat(str(value).strip().replace("T", " ")).replace(tzinfo=None)
    except ValueError:
        return None


def _same_time(expected: Any, got: Any) -> bool:
    """Equal instants (a date is its midnight); text that is no datetime is compared as text."""
    a, b = _as_time(expected), _as_time(got)
    if a is None or b is None:
        return _normal_text(expected) == _normal_text(got)
    return a == b


def _normal_text(value: Any) -> str:
    return re.sub(r"\s+", " ", str(value)).strip().casefold()


@cache
def _unit_aliases() -> dict[str, str]:
    raw = yaml.safe_load(resources.files("pipeline.env").joinpath("unit_aliases.yaml").read_text())
    return {
        _squeeze(alias): _squeeze(canonical) for canonical, aliases in raw.items() for alias in [canonical, *aliases]
    }


def _squeeze(unit: Any) -> str:
    return re.sub(r"\s+", "", str(unit)).casefold()


def normal_unit(unit: Any) -> str | None:
    """A unit's canonical spelling (case, whitespace and the alias table); None stays None."""
    if unit is None or str(unit).strip() == "":
        return None
    squeezed = _squeeze(unit)
    return _unit_aliases().get(squeezed, squeezed)
