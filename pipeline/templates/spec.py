"""A question template as data: the YAML model and the files beside it (gold SQL, gold Python, evidence SQL)."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

INTENTS = ("encounter", "diagnosis_procedure", "laboratory", "medication", "vital_signs", "microbiology")
# The sub-types of DESIGN.md; the noise registry (a later issue) will own this list.
NOISE_SUBTYPES = (
    "missing_record",
    "orphan_reference",
    "conflicting_duplicate",
    "displaced_time",
    "null_value",
    "implausible_value",
    "unit_mismatch",
    "placeholder_value",
    "nonexistent_entity",
    "false_premise",
    "out_of_window",
    "unknown_concept",
)


class TemplateError(Exception):
    """A template is broken; the message names its file and the problem."""


class AnswerType(str, Enum):
    number = "number"
    count = "count"  # type: ignore[assignment]  # typeshed's str.count method; the member shadows it on purpose
    text = "text"
    list = "list"
    boolean = "boolean"
    datetime = "datetime"


class Scope(str, Enum):
    patient = "patient"
    population = "population"


class Slot(BaseModel):
    """A typed question slot; its values come from the template's sampler query (values that exist)."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field(pattern="^(integer|number|text|datetime|date)$")
    description: str = ""
    # For a slot that names a clinical concept: the `table.column` holding the valid names (query-level
    # noise swaps it for a name absent there, or present there but absent for the patient).
    vocabulary: str | None = Field(default=None, pattern=r"^[a-z_]+\.[a-z_]+$")


class Answer(BaseModel):
    """What the gold programs return: a `value` column, optionally `unit`, plus the record columns."""

    model_config = ConfigDict(extra="forbid")
    type: AnswerType
    unit: str | None = None  # a fixed unit; or the programs return a `unit` column
    tolerance: float = 1e-6  # numbers: absolute tolerance after rounding both sides
    ordered: bool = False  # lists: order matters
    records: list[str] = []  # columns naming the records the answer rests on (e.g. charttime, itemid)
    # The record columns every phrasing asks for ("... and when was it measured?"): only these are scored and
    # shown in the task's answer format; the other `records` are kept in labels as the answer's provenance.
    asked_records: list[str] = []
    # The answer summarises every reading in the question's scope (a maximum over a stay) or picks one of them by
    # time (the first after ICU admission): an impossible reading among them may be left out by a careful analyst
    # (and the next one read), so leaving it out is accepted beside abstaining.
    summarises_readings: bool = False

    @model_validator(mode="after")
    def _asked_are_records(self) -> Answer:
        unknown = [c for c in self.asked_records if c not in self.records]
        if unknown:
            raise ValueError(f"asked_records {unknown} are not among records {self.records}")
        return self


class TemplateSpec(BaseModel):
    """The YAML file of one template."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern="^[a-z][a-z0-9_]*$")
    version: int = 1
    intent: str
    scope: Scope
    questions: list[str] = Field(min_length=2)
    slots: dict[str, Slot]
    sampler: str  # SQL returning one row per candidate slot combination, one column per slot
    answer: Answer
    noise: list[str] = []  # noise sub-types that can apply
    difficulty: str = Field(default="medium", pattern="^(easy|medium|hard)$")

    @field_validator("intent")
    @classmethod
    def _known_intent(cls, value: str) -> str:
        if value not in INTENTS:
            raise ValueError(f"intent must be one of {INTENTS}, got {value!r}")
        return value


class Template(BaseModel):
    """A template with the text of its programs, read from `templates/<intent>/<id>.*`."""

    model_config = ConfigDict(extra="forbid")
    spec: TemplateSpec
    path: Path
    gold_sql: str
    gold_python: str
    evidence_sql: str

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def evidence_tables(self) -> frozenset[str]:
        """The tables the evidence SQL names as `'<table>' AS table_name` (where its evidence rows come from)."""
        return frozenset(re.findall(r"'([a-z_]+)'\s+AS\s+table_name", self.evidence_sql, re.I))

    @property
    def evidence_table(self) -> str | None:
        """The one table the evidence rows come from (None: several)."""
        return next(iter(self.evidence_tables)) if len(self.evidence_tables) == 1 else None


def read_template(yaml_path: Path) -> Template:
    """Read and validate one template; every problem raises TemplateError naming the file."""
    yaml_path = Path(yaml_path)
    try:
        raw = yaml.safe_load(yaml_path.read_text())
        spec = TemplateSpec.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise TemplateError(f"{yaml_path}: cannot read YAML: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise TemplateError(f"{yaml_path}: invalid template: {problems}") from exc
    if spec.id != yaml_path.stem:
        raise TemplateError(f"{yaml_path}: id {spec.id!r} must equal the file name {yaml_path.stem!r}")
    if spec.intent != yaml_path.parent.name:
        raise TemplateError(f"{yaml_path}: intent {spec.intent!r} must equal its folder {yaml_path.parent.name!r}")
    texts = {}
    for key, suffix in (("gold_sql", ".sql.j2"), ("gold_python", ".py"), ("evidence_sql", ".evidence.sql.j2")):
        path = yaml_path.with_name(yaml_path.stem + suffix)
        if not path.is_file():
            raise TemplateError(f"{yaml_path}: missing {path.name} beside it")
        texts[key] = path.read_text()
    return Template(spec=spec, path=yaml_path, **texts)
