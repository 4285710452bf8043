"""The deterministic verifier: Answer Match and Abstention Validity of one episode's trajectory against its label.

Answer Match (`pipeline.templates.matching`, the one matcher the pair verifier uses too) compares the final
answer with the label's expected answer under the template's Answer spec
(numbers within the tolerance, lists as multisets unless ordered, and the record fields the question asks for,
`answer.asked_records`, with datetimes and numbers normalised; other associated records are never required).
Units are normalised through `unit_aliases.yaml`; a number given without a unit takes the expected unit (the task's
answer format states it), and one given in another unit of the same dimension is converted through
`unit_conversions.yaml` before the tolerance applies. A repair contract is matched against its repaired expected
value. A noisy label's `accepted` answers (other readings a careful analyst may give: a conflicting record's copies
kept in turn, the corroborated true time of a displaced event) pass Answer Match as well.

Abstention Validity holds for an expected NULL when the answer is NULL and a successful gateway statement (via
`sql` or `python`) covered the evidence on the clean source (`pipeline.env.abstention`: its predicates on a table
holding the evidence hold for an evidence row, a dictionary entry of one, or the looked-up entity). Without a
source connection the rule of version 1 applies: a statement pinning each inspect filter column to its value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import duckdb
import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import expressions as exp

from pipeline.env.abstention import coverage
from pipeline.env.records import Trajectory
from pipeline.release.records import LabelRecord
from pipeline.source.schema import load_schema
from pipeline.templates.answers import AnswerValue
from pipeline.templates.matching import answer_mismatches, as_number
from pipeline.templates.registry import load_templates
from pipeline.templates.spec import Template

RULE_VERSION = 3  # 2: abstention validity from evidence coverage; unit-free and converted-unit numbers match
# 3: a label's accepted answers (other defensible readings) pass Answer Match


class Verdict(BaseModel):
    """One episode's verdict: passed, the two rules (None where a rule does not apply) and what failed."""

    model_config = ConfigDict(extra="forbid")
    passed: bool
    answer_match: bool | None
    abstention_valid: bool | None
    reasons: list[str] = []


def verify(
    label: LabelRecord,
    trajectory: Trajectory,
    template: Template | None = None,
    source: duckdb.DuckDBPyConnection | None = None,
) -> Verdict:
    """Score a trajectory against its label; `template` defaults to the registry's template of the label.
    `source` (the clean source database, read by the verifier only) decides abstention validity by evidence
    coverage; without it the equality-pin rule of version 1 applies."""
    if trajectory.task_id != label.task_id:
        raise ValueError(
            f"trajectory of task {trajectory.task_id!r} cannot be verified against the label of task {label.task_id!r}"
        )
    template = template or template_of(label)
    answer = trajectory.answer
    if answer is None:
        why = "the episode ran out of turns" if trajectory.truncated else "the episode ended"
        return Verdict(
            passed=False,
            answer_match=False,
            abstention_valid=None,
            reasons=[f"no answer: {why} without an answer call"],
        )
    if answer.value is not None and any(not answer_mismatches(a, answer, template.spec.answer) for a in label.accepted):
        return Verdict(passed=True, answer_match=True, abstention_valid=None)  # another defensible reading
    if label.expected.value is None:
        return _verify_abstention(label, answer, trajectory, template, source)
    reasons = answer_mismatches(label.expected, answer, template.spec.answer)
    covered = None
    if answer.value is None and source is not None:  # a wrong abstention: say whether it looked at the evidence
        found = coverage(label, trajectory, template, source)
        covered = found.covered
        reasons.append(
            ("the trace covered the evidence: " if covered else "the trace did not cover the evidence: ") + found.detail
        )
    return Verdict(passed=not reasons, answer_match=not reasons, abstention_valid=covered, reasons=reasons)


def _verify_abstention(
    label: LabelRecord,
    answer: AnswerValue,
    trajectory: Trajectory,
    template: Template,
    source: duckdb.DuckDBPyConnection | None,
) -> Verdict:
    answered = answer.value
    reasons = (
        []
        if answered is None
        else [f"expected NULL ({label.contract}: the record does not support an answer), got {answered!r}"]
    )
    if source is not None:
        found = coverage(label, trajectory, template, source)
        missing = None if found.covered else f"abstention not supported by the trace: {found.detail}"
    elif label.inspect is None:
        return Verdict(
            passed=not reasons,
            answer_match=not reasons,
            abstention_valid=None,
            reasons=reasons + ["label has no inspect target: abstention validity not checked"],
        )
    else:
        missing = uninspected(label.inspect, trajectory, template)
    if missing:
        reasons.append(missing)
    return Verdict(passed=not reasons, answer_match=answered is None, abstention_valid=not missing, reasons=reasons)


@cache
def _templates() -> dict[str, Template]:
    return {t.id: t for t in load_templates()}


def registry_template(template_id: str) -> Template:
    """A template of the registry by id (loaded once); an unknown id raises ValueError naming it."""
    if template_id not in _templates():
        raise ValueError(f"template {template_id!r} is not in the template registry")
    return _templates()[template_id]


def template_of(label: LabelRecord) -> Template:
    """The registry's template of a label; a missing template or another version raises ValueError."""
    if label.template_id not in _templates():
        raise ValueError(f"task {label.task_id}: template {label.template_id!r} is not in the template registry")
    template = _templates()[label.template_id]
    if template.spec.version != label.template_version:
        raise ValueError(
            f"task {label.task_id}: label has template {label.template_id!r} v{label.template_version}, "
            f"the registry has v{template.spec.version}"
        )
    return template


# --- Abstention Validity -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """A filter an evidence-reading statement must hold: `column` (None: any column) equal to one of `values`."""

    key: str
    column: str | None
    values: tuple[str, ...]

    def describe(self, table: str) -> str:
        target = f"{table}.{self.column}" if self.column else f"a column ({self.key})"
        shown = self.values[0] if len(self.values) == 1 else f"one of {list(self.values)}"
        return f"{target} = {shown}"


def required_pins(inspect: dict[str, Any], template: Template | None) -> list[Pin]:
    """The inspect filter as pins: keys that are columns of the table pin that column; a concept slot of the
    template (one with a vocabulary, e.g. `lab_label`) pins its name on any column (a joined dictionary);
    other keys (thresholds, counts, units) are question parameters, not the entity, and pin nothing."""
    table = _inspect_table(inspect)
    columns = set(load_schema()[table].column_names)
    slots = template.spec.slots if template else {}
    pins = []
    for key, value in sorted(inspect.get("filter", {}).items()):
        values = tuple(_literal_text(v) for v in (value if isinstance(value, list) else [value]))
        if key in columns:
            pins.append(Pin(key, key, values))
        elif key in slots and slots[key].vocabulary:
            pins.append(Pin(key, None, values))
    return pins


def _inspect_table(inspect: dict[str, Any]) -> str:
    table = inspect.get("table")
    if table not in load_schema():
        raise ValueError(f"inspect target names table {table!r}, which is not a MIMIC-IV table (inspect: {inspect})")
    return table


def uninspected(inspect: dict[str, Any], trajectory: Trajectory, template: Template | None) -> str | None:
    """None when some successful statement read the inspect table with every pin; else what is missing."""
    table, pins = _inspect_table(inspect), required_pins(inspect, template)
    best: list[Pin] | None = None
    for call in trajectory.calls:
        for query in call.queries:
            if not query.ok:
                continue
            unmet = _unmet_pins(query.sql, table, pins)
            if unmet is not None and (best is None or len(unmet) < len(best)):
                best = unmet
            if unmet == []:
                return None
    if best is None:
        return f"abstention not supported by the trace: no successful query read table {table!r}"
    missing = "; ".join(p.describe(table) for p in best)
    return f"abstention not supported by the trace: no successful query on {table!r} filtered {missing}"


def _unmet_pins(sql: str, table: str, pins: list[Pin]) -> list[Pin] | None:
    """The pins this statement does not hold (None: it does not read `table` or does not parse)."""
    try:
        tree = sqlglot.parse_one(sql, dialect="duckdb")
    except sqlglot.errors.SqlglotError:
        return None
    names = {t.alias_or_name for t in tree.find_all(exp.Table) if t.name == table} | {table}
    if not any(t.name == table for t in tree.find_all(exp.Table)):
        return None
    columns = set(load_schema()[table].column_names)
    found = list(_equalities(tree))
    return [p for p in pins if not any(_holds(p, q, c, v, names, columns) for q, c, v in found)]


def _holds(pin: Pin, qualifier: str, column: str, value: str, names: set[str], columns: set[str]) -> bool:
    if value not in pin.values:
        return False
    if pin.column is None:
        return True
    return column == pin.column and (qualifier in names or (qualifier == "" and column in columns))


def _equalities(tree: exp.Expr) -> Iterator[tuple[str, str, str]]:
    """(qualifier, column, literal) for every `col = lit`, `lit = col`, `col IN (lits)` and wildcard-free LIKE."""
    for node in tree.find_all(exp.EQ, exp.In, exp.Like, exp.ILike):
        if isinstance(node, exp.In):
            column = _column(node.this)
            literals = [_literal(e) for e in node.expressions]
            if column is not None:
                yield from ((column[0], column[1], lit) for lit in literals if lit is not None)
            continue
        for left, right in ((node.this, node.expression), (node.expression, node.this)):
            column, literal = _column(left), _literal(right)
            pattern = isinstance(node, exp.Like | exp.ILike) and literal is not None and "%" in literal
            if column is not None and literal is not None and not pattern:
                yield column[0], column[1], literal


_WRAPPERS = (exp.Lower, exp.Upper, exp.Trim, exp.Cast, exp.TryCast, exp.Paren)


def _column(node: exp.Expr) -> tuple[str, str] | None:
    while isinstance(node, _WRAPPERS):
        node = node.this
    return (node.table, node.name) if isinstance(node, exp.Column) else None


def _literal(node: exp.Expr) -> str | None:
    while isinstance(node, _WRAPPERS):
        node = node.this
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return _literal_text("-" + node.this.this)
    return _literal_text(node.this) if isinstance(node, exp.Literal) else None


def _literal_text(value: Any) -> str:
    """A filter value or SQL literal as comparable text (numbers in one spelling; text case-folded)."""
    number = as_number(value) if not isinstance(value, str) or re.fullmatch(r"-?\d+(\.\d+)?", value.strip()) else None
    if number is not None:
        return repr(int(number)) if number == int(number) else repr(number)
    return str(value).casefold()
