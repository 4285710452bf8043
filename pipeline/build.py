"""The release build's config and the helpers its stages share.

The stages live in `pipeline.stages` (they pass paths, so the Airflow DAGs can run them one task at a time), in
the order of `pipeline.stage_table`; `pipeline.stages.run_build` runs them all in one process.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field, model_validator

import pipeline
from pipeline.noise.base import LEVELS, NoiseSubtype, subtypes
from pipeline.noise.verify import NoisePair
from pipeline.release.records import LabelRecord, PatchRecord, TaskRecord, records_of
from pipeline.release.splits import PAPER_TEST_SIZE, SCOPES, SplitReport
from pipeline.source.schema import TABLE_NAMES
from pipeline.stage_table import FILL_TASKS
from pipeline.templates.instantiate import InstantiationReport
from pipeline.templates.registry import DEFAULT_TEMPLATES, load_templates
from pipeline.templates.spec import INTENTS, Template

Progress = Callable[[str, int, int], None]  # (stage, done, total)


class BuildConfig(BaseModel):
    """Everything that decides a release's content (recorded in its manifest)."""

    model_config = ConfigDict(extra="forbid")
    db: Path
    releases_dir: Path
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    seed: int = 0
    per_template: int = Field(default=5, ge=1)
    levels: list[str] = list(LEVELS)
    subtypes: list[str] | None = None  # None: every registered sub-type of the chosen levels
    intents: list[str] = list(INTENTS)
    scopes: list[str] = list(SCOPES)
    test_size: int = PAPER_TEST_SIZE
    templates_dir: Path = DEFAULT_TEMPLATES
    pairs_per_cell: int | None = Field(default=None, ge=1)  # cap per intent x scope x level x sub-type (ablations)
    fill_tasks: int = Field(default=FILL_TASKS, ge=0)  # further tasks per template for an empty cell (0: none)

    @model_validator(mode="after")
    def _known_names(self) -> BuildConfig:
        for field, known in (("levels", LEVELS), ("intents", INTENTS), ("scopes", SCOPES)):
            unknown = sorted(set(getattr(self, field)) - set(known))
            if unknown:
                raise ValueError(f"BuildConfig.{field}: unknown value(s) {unknown}; expected some of {list(known)}")
        return self

    def manifest_config(self) -> dict[str, Any]:
        """The content-deciding fields as the manifest records them (an unset cap is left out, as before it existed)."""
        exclude = {"db", "releases_dir", "templates_dir", "version"} | (
            {"pairs_per_cell"} if self.pairs_per_cell is None else set()
        )
        return self.model_dump(mode="json", exclude=exclude)


def source_fingerprint(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Row count and an order-independent content hash per table, folded into one digest."""
    digest, counts = hashlib.sha256(), {}
    for table in TABLE_NAMES:
        count, total = con.sql(f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0) FROM {table} t").fetchall()[0]
        counts[table] = count
        digest.update(f"{table}:{count}:{total};".encode())
    return {"fingerprint": digest.hexdigest(), "rows": counts, "patients": counts["patients"]}


def select_templates(config: BuildConfig) -> list[Template]:
    return [
        t
        for t in load_templates(config.templates_dir)
        if t.spec.intent in config.intents and t.spec.scope.value in config.scopes
    ]


def select_subtypes(config: BuildConfig) -> dict[str, NoiseSubtype]:
    registered = subtypes()
    unknown = sorted(set(config.subtypes or []) - set(registered))
    if unknown:
        raise ValueError(f"unknown noise sub-type(s) {unknown}; registered: {sorted(registered)}")
    return {
        n: s
        for n, s in sorted(registered.items())
        if s.level in config.levels and (config.subtypes is None or n in config.subtypes)
    }


def cap_per_cell(pairs: list[NoisePair], per_cell: int | None, seed: int) -> list[NoisePair]:
    """At most `per_cell` pairs per intent x scope x level x sub-type cell, drawn in a seeded order."""
    if per_cell is None:
        return pairs
    cells: dict[tuple, list[NoisePair]] = defaultdict(list)
    for pair in pairs:
        cells[(pair.clean.intent, pair.clean.scope, pair.level, pair.subtype)].append(pair)
    order = lambda p: hashlib.sha256(f"{seed}:cap:{p.pair_id}".encode()).hexdigest()  # noqa: E731
    keep = {p.pair_id for cell in cells.values() for p in sorted(cell, key=order)[:per_cell]}
    return [p for p in pairs if p.pair_id in keep]


def counts_by_cell(labels: list[LabelRecord]) -> dict[str, dict[str, int]]:
    """Pairs per split and per intent/scope/level/sub-type cell."""
    out: dict[str, Counter] = {}
    for lab in labels:
        if lab.condition == "noise":
            out.setdefault(lab.split, Counter())[f"{lab.intent}/{lab.scope}/{lab.level}/{lab.subtype}"] += 1
    return {split: dict(sorted(cells.items())) for split, cells in sorted(out.items())}


def build_records(
    pairs: list[NoisePair], split: dict[str, str], templates: list[Template]
) -> tuple[list[TaskRecord], list[LabelRecord], list[PatchRecord]]:
    specs = {t.id: t.spec.answer for t in templates}
    tasks, labels, patches = [], [], []
    for pair in pairs:
        if split[pair.pair_id] == "dropped":
            continue
        pair_tasks, pair_labels, patch = records_of(pair, split[pair.pair_id], specs[pair.clean.template_id])
        tasks += pair_tasks
        labels += pair_labels
        patches.append(patch)
    return tasks, labels, patches


def manifest_of(
    config: BuildConfig,
    source: dict,
    templates: list[Template],
    chosen: dict[str, NoiseSubtype],
    inst: InstantiationReport,
    rejected: Counter,
    split_report: SplitReport,
    labels: list[LabelRecord],
    verified_count: int,
    filled: dict[str, Any],
    fill_draw: InstantiationReport,
) -> dict[str, Any]:
    published = sum(lab.condition == "noise" for lab in labels)
    verifications = verified_count + sum(rejected.values())  # every attempt either verified or was rejected
    return {
        "version": config.version,
        "seed": config.seed,
        "ehrgym_version": pipeline.__version__,
        "config": config.manifest_config(),
        "source": source,
        "templates": {t.id: t.spec.version for t in templates},
        "subtypes": {name: s.version for name, s in chosen.items()},
        "clean_tasks": {
            "kept": sum(inst.kept.values()),
            "agreement_rate": inst.agreement_rate,
            "dropped": inst.dropped,
        },
        "pairs": {
            "verified": verified_count,
            "published": published,
            "verifications": verifications,
            "verifications_per_published": round(verifications / published, 2) if published else None,
            "split": split_report.model_dump(),
            "counts": counts_by_cell(labels),
            "filled_cells": filled,
            # the further clean tasks drawn to fill cells: kept per template, candidates dropped and why
            "fill_draw": {"kept": fill_draw.kept, "dropped": fill_draw.dropped},
        },
        "rejections": {f"{t}/{s}/{r}": n for (t, s, r), n in sorted(rejected.items())},
    }
