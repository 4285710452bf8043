"""The noise sub-type interface and its registry: one class per sub-type, found by name, never by if/elif."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import duckdb
import numpy as np

from pipeline.noise.patch import Patch
from pipeline.templates.answers import AnswerValue
from pipeline.templates.instantiate import CleanTask
from pipeline.templates.spec import Template

LEVELS = ("record", "value", "query")


class Rejected(Exception):
    """A sub-type cannot make a valid noisy twin of this task; `reason` is counted."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class NoisyTwin:
    """What a sub-type proposes: the patch, the contract's expected answer and how to check it.

    `reference_sql(slots)` renders the noisy reference SQL; `reference_python(tables, slots)` computes the
    same answer in polars. Both run on the overlay and must return `expected` (None = abstain).
    `inspect` names the evidence an agent must have looked at: a table filtered on the entity.
    `readings` are SQL programs (on the overlay) whose answers a careful analyst may give as well (each copy of a
    conflicting record kept in turn); `accepts_clean`: the clean answer may be given as well (the true time of a
    displaced event that other records corroborate); `also_accepted` are such answers the sub-type computed itself.
    The careless reading must differ from every one of them.
    """

    patch: Patch
    contract: str  # "abstain" | "repair"
    expected: AnswerValue | None  # None for "repair": the reference programs compute it on the overlay
    reference_sql: str
    reference_python: Any
    inspect: dict[str, Any]
    readings: tuple[str, ...] = ()
    accepts_clean: bool = False
    also_accepted: tuple[AnswerValue, ...] = ()  # further answers computed by the sub-type
    answer_unit: str | None = None  # the unit the noisy question's answer comes in, where it names another concept


class NoiseSubtype(ABC):
    """One noise sub-type. Subclasses set name/level/version and implement `applies` and `make`."""

    name: ClassVar[str]
    level: ClassVar[str]
    version: ClassVar[int] = 1
    requires: ClassVar[str] = "nothing beyond being listed"  # what `applies` asks of a template, in words (lint)
    # The noise claims the record holds no answer: the clean gold program must find nothing on the noisy data
    # or count nothing (hiding the top N items' rows of a top-N question leaves another, fully supported top N;
    # hiding a patient's stays in a unit makes "was the patient ever in the unit?" a supported "no": no pair).
    noisy_data_unanswerable: ClassVar[bool] = False

    def applies(self, template: Template) -> bool:
        """The template lists the sub-type (templates declare which noise makes sense for them)."""
        return self.name in template.spec.noise

    @abstractmethod
    def make(
        self, con: duckdb.DuckDBPyConnection, task: CleanTask, template: Template, rng: np.random.Generator
    ) -> NoisyTwin:
        """Build the noisy twin of a clean task on the source `con`, or raise Rejected(reason)."""


REGISTRY: dict[str, NoiseSubtype] = {}


def register(cls: type[NoiseSubtype]) -> type[NoiseSubtype]:
    """Class decorator: add a sub-type to the registry under its name."""
    if cls.level not in LEVELS:
        raise ValueError(f"{cls.__name__}: level must be one of {LEVELS}")
    if cls.name in REGISTRY:
        raise ValueError(f"noise sub-type {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls()
    return cls


def subtypes() -> dict[str, NoiseSubtype]:
    """Every registered sub-type by name (importing the package registers them)."""
    import pipeline.noise.subtypes  # noqa: F401 - registers on import

    return dict(REGISTRY)
