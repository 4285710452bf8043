"""Facts about measurement tables (value, unit, time columns) read from `measurements.yaml`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class MeasurementTable:
    name: str
    key: tuple[str, ...]
    number: str
    text: str | None
    unit: str
    time: str
    item: str


@cache
def measurement_tables() -> dict[str, MeasurementTable]:
    raw = yaml.safe_load(resources.files("pipeline.noise").joinpath("measurements.yaml").read_text())
    return {name: MeasurementTable(name=name, **{**spec, "key": tuple(spec["key"])}) for name, spec in raw.items()}


@dataclass(frozen=True)
class PlausibleRange:
    label: str
    low: float
    high: float


@cache
def plausible_ranges() -> dict[str, dict[int, PlausibleRange]]:
    """{table: {itemid: range}} from `plausibility.yaml`."""
    raw = yaml.safe_load(resources.files("pipeline.noise").joinpath("plausibility.yaml").read_text())
    return {table: {int(item): PlausibleRange(**spec) for item, spec in items.items()} for table, items in raw.items()}
