"""Lint every template and report all problems by file: one broken template never hides the others."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2
import jinja2.meta
import sqlglot
import yaml
from sqlglot import expressions as exp
from sqlglot.errors import ParseError
from sqlglot.optimizer.qualify import qualify

from pipeline.source.schema import load_schema
from pipeline.templates.programs import load_python_program
from pipeline.templates.registry import DEFAULT_TEMPLATES, template_files
from pipeline.templates.render import environment, render, render_sql
from pipeline.templates.spec import NOISE_SUBTYPES, Template, TemplateError, read_template

_SAMPLE_VALUES = {
    "integer": 1,
    "number": 1.5,
    "text": "x",
    "datetime": dt.datetime(2150, 1, 1),
    "date": dt.date(2150, 1, 1),
}


@dataclass
class LintResult:
    """Problems found in one template file (empty when it is clean)."""

    path: Path
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@cache
def _sqlglot_schema() -> dict[str, object]:  # {table: {column: type}}, as qualify() types its schema
    return {t.name: {c.name: c.duckdb_type for c in t.columns} for t in load_schema().values()}


def sql_problems(sql: str, what: str) -> list[str]:
    """Parse with sqlglot (DuckDB dialect); the query may name only tables and columns of the 31-table schema."""
    try:
        tree = sqlglot.parse_one(sql, dialect="duckdb")
    except ParseError as exc:
        return [f"{what}: does not parse: {str(exc).splitlines()[0]}"]
    if not isinstance(tree, exp.Query):
        return [f"{what}: is not a query (got {type(tree).__name__})"]
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    unknown = sorted({t.name for t in tree.find_all(exp.Table)} - set(_sqlglot_schema()) - ctes)
    if unknown:
        return [f"{what}: unknown table(s) {unknown}"]
    try:
        qualify(tree, schema=_sqlglot_schema(), dialect="duckdb", validate_qualify_columns=True)
    except Exception as exc:  # noqa: BLE001 - sqlglot raises several error types for unresolved names
        return [f"{what}: {str(exc).splitlines()[0]}"]
    return []


def _variables(text: str) -> set[str]:
    return jinja2.meta.find_undeclared_variables(environment().parse(text))


def slot_problems(template: Template) -> list[str]:
    """Every slot is defined and used: each phrasing and the gold SQL mention all slots, nothing undefined."""
    spec, defined, problems = template.spec, set(template.spec.slots), []
    for i, question in enumerate(spec.questions):
        used = _variables(question)
        if used - defined:
            problems.append(f"questions[{i}]: undefined slot(s) {sorted(used - defined)}")
        if defined - used:
            problems.append(f"questions[{i}]: does not mention slot(s) {sorted(defined - used)}")
    for what, text in (("gold SQL", template.gold_sql), ("evidence SQL", template.evidence_sql)):
        used = _variables(text)
        if used - defined:
            problems.append(f"{what}: undefined slot(s) {sorted(used - defined)}")
    if defined - _variables(template.gold_sql):
        problems.append(f"gold SQL: does not use slot(s) {sorted(defined - _variables(template.gold_sql))}")
    if spec.scope.value == "patient" and "subject_id" not in defined:
        problems.append("slots: a patient-level template needs a subject_id slot (splits keep patients disjoint)")
    schema = load_schema()
    for name, slot in spec.slots.items():
        if slot.vocabulary:
            table, _, column = slot.vocabulary.partition(".")
            if table not in schema or column not in schema[table].column_names:
                problems.append(f"slots.{name}.vocabulary: {slot.vocabulary!r} is not a column of the schema")
    unknown_noise = sorted(set(spec.noise) - set(NOISE_SUBTYPES))
    if unknown_noise:
        problems.append(f"noise: unknown sub-type(s) {unknown_noise}; expected some of {list(NOISE_SUBTYPES)}")
    return problems


@cache
def record_cues() -> dict[str, list[str]]:
    """{record field: the words by which a question asks for it} from `record_cues.yaml`."""
    return yaml.safe_load(resources.files("pipeline.templates").joinpath("record_cues.yaml").read_text())


def asked_in(question: str, field_name: str) -> bool:
    """The question asks for the record field: one of its cues occurs in the text (its own name by default)."""
    cues = record_cues().get(field_name, [field_name.replace("_", " ")])
    return any(re.search(rf"\b{re.escape(cue)}\b", question, flags=re.I) for cue in cues)


def answer_problems(template: Template) -> list[str]:
    """Score only what is asked: every scored record field is asked for in every phrasing."""
    return [
        f"questions[{i}]: answer.asked_records scores {field_name!r}, but this phrasing never asks for it "
        f"(cues: {record_cues().get(field_name, [field_name.replace('_', ' ')])})"
        for i, question in enumerate(template.spec.questions)
        for field_name in template.spec.answer.asked_records
        if not asked_in(question, field_name)
    ]


def sample_slots(template: Template) -> dict[str, object]:
    """A value of the right type for every slot: renders any of the template's texts for parsing."""
    return {name: _SAMPLE_VALUES[slot.type] for name, slot in template.spec.slots.items()}


def render_problems(template: Template) -> list[str]:
    """Render everything with sample slot values, then check the rendered SQL against the schema."""
    slots = sample_slots(template)
    problems = sql_problems(render(template.spec.sampler, {}), "sampler")
    try:
        for question in template.spec.questions:
            render(question, slots)
        problems += sql_problems(render_sql(template.gold_sql, slots), "gold SQL")
        problems += sql_problems(render_sql(template.evidence_sql, slots), "evidence SQL")
    except jinja2.TemplateError as exc:
        problems.append(f"Jinja2 does not render: {exc}")
    try:
        load_python_program(template)
    except Exception as exc:  # noqa: BLE001 - a syntax or import error of the template's own file
        problems.append(f"gold Python: {type(exc).__name__}: {exc}")
    return problems


def noise_problems(template: Template) -> list[str]:
    """Every listed noise sub-type must be able to apply to the template (a listing that never applies misleads)."""
    from pipeline.noise.base import subtypes  # the noise package builds on templates, not the other way round

    registry = subtypes()
    return [
        f"noise: {name!r} cannot apply here; it needs {registry[name].requires}"
        for name in template.spec.noise
        if name in registry and not registry[name].applies(template)
    ]


def lint_file(path: Path) -> LintResult:
    result = LintResult(Path(path))
    try:
        template = read_template(path)
    except TemplateError as exc:
        result.problems.append(str(exc).removeprefix(f"{path}: "))
        return result
    result.problems += (
        slot_problems(template) + answer_problems(template) + render_problems(template) + noise_problems(template)
    )
    return result


def lint_all(root: Path = DEFAULT_TEMPLATES) -> list[LintResult]:
    """Lint every template file; ids used twice are reported on each file that uses them."""
    results = [lint_file(path) for path in template_files(root)]
    stems = [r.path.stem for r in results]
    for result in results:
        if stems.count(result.path.stem) > 1:
            result.problems.append(f"duplicate template id {result.path.stem!r}")
    return results
