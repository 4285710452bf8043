"""The whole chain in one process: source fingerprint -> clean tasks -> verified pairs -> splits -> gates -> release.

Each stage is a plain function of explicit inputs; `run_build` calls them in order, and the Airflow DAGs call
the same functions one task at a time.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field

import pipeline
from pipeline.noise.base import LEVELS, NoiseSubtype, subtypes
from pipeline.noise.verify import NoisePair
from pipeline.release.pairs import candidate_pairs, choose_pairs
from pipeline.release.publish import publish_release
from pipeline.release.records import LabelRecord, PatchRecord, TaskRecord, records_of
from pipeline.release.splits import PAPER_TEST_SIZE, SplitReport, assign_splits
from pipeline.source.schema import TABLE_NAMES
from pipeline.templates.instantiate import InstantiationReport, instantiate
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
    per_template: int = 5
    levels: list[str] = list(LEVELS)
    subtypes: list[str] | None = None  # None: every registered sub-type of the chosen levels
    intents: list[str] = list(INTENTS)
    scopes: list[str] = ["patient", "population"]
    test_size: int = PAPER_TEST_SIZE
    templates_dir: Path = DEFAULT_TEMPLATES


def source_fingerprint(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Row count and an order-independent content hash per table, folded into one digest."""
    digest, counts = hashlib.sha256(), {}
    for table in TABLE_NAMES:
        count, total = con.sql(f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0) FROM {table} t").fetchall()[0]
        counts[table] = count
        digest.update(f"{table}:{count}:{total};".encode())
    return {"fingerprint": digest.hexdigest(), "rows": counts, "patients": counts["patients"]}


def select_templates(config: BuildConfig) -> list[Template]:
    return [t for t in load_templates(config.templates_dir) if t.spec.intent in config.intents and t.spec.scope.value in config.scopes]


def select_subtypes(config: BuildConfig) -> dict[str, NoiseSubtype]:
    registered = subtypes()
    unknown = sorted(set(config.subtypes or []) - set(registered))
    if unknown:
        raise ValueError(f"unknown noise sub-type(s) {unknown}; registered: {sorted(registered)}")
    return {n: s for n, s in sorted(registered.items()) if s.level in config.levels and (config.subtypes is None or n in config.subtypes)}


def counts_by_cell(labels: list[LabelRecord]) -> dict[str, dict[str, int]]:
    """Pairs per split and per intent/scope/level/sub-type cell."""
    out: dict[str, Counter] = {}
    for lab in labels:
        if lab.condition == "noise":
            out.setdefault(lab.split, Counter())[f"{lab.intent}/{lab.scope}/{lab.level}/{lab.subtype}"] += 1
    return {split: dict(sorted(cells.items())) for split, cells in sorted(out.items())}


def build_records(pairs: list[NoisePair], split: dict[str, str]) -> tuple[list[TaskRecord], list[LabelRecord], list[PatchRecord]]:
    tasks, labels, patches = [], [], []
    for pair in pairs:
        if split[pair.pair_id] == "dropped":
            continue
        pair_tasks, pair_labels, patch = records_of(pair, split[pair.pair_id])
        tasks += pair_tasks
        labels += pair_labels
        patches.append(patch)
    return tasks, labels, patches


def manifest_of(config: BuildConfig, source: dict, templates: list[Template], chosen: dict[str, NoiseSubtype],
                inst: InstantiationReport, rejected: Counter, split_report: SplitReport, labels: list[LabelRecord],
                verified_count: int) -> dict[str, Any]:
    return {
        "version": config.version, "seed": config.seed, "ehrgym_version": pipeline.__version__,
        "config": config.model_dump(mode="json", exclude={"db", "releases_dir", "templates_dir", "version"}),
        "source": source,
        "templates": {t.id: t.spec.version for t in templates},
        "subtypes": {name: s.version for name, s in chosen.items()},
        "clean_tasks": {"kept": sum(inst.kept.values()), "agreement_rate": inst.agreement_rate, "dropped": inst.dropped},
        "pairs": {"verified": verified_count, "published": sum(lab.condition == "noise" for lab in labels),
                  "split": split_report.model_dump(), "counts": counts_by_cell(labels)},
        "rejections": {f"{t}/{s}/{r}": n for (t, s, r), n in sorted(rejected.items())},
    }


def run_build(config: BuildConfig, progress: Progress | None = None, gate: Callable | None = None) -> Path:
    """Build and publish `releases_dir/version`. `gate(tasks, labels, patches, con)` returns a report (published
    as gates.json) or raises to stop the export; by default the pair gate of `pipeline.quality.pair_gate`."""
    if (Path(config.releases_dir) / config.version).exists():
        raise FileExistsError(f"{Path(config.releases_dir) / config.version} already exists; versions are never overwritten")
    con = duckdb.connect(str(config.db), read_only=True)
    try:
        source = {"database": Path(config.db).name, **source_fingerprint(con)}
        templates, chosen = select_templates(config), select_subtypes(config)
        done = itertools.count(1)
        tasks, inst = instantiate(con, templates, config.per_template, config.seed,
                                  on_template=lambda t, n: progress and progress("tasks", next(done), len(templates)))
        by_id = {t.id: t for t in templates}
        verified, rejected = candidate_pairs(con, tasks, by_id, chosen, config.seed,
                                             on_task=lambda n: progress and progress("pairs", n, len(tasks)))
        pairs = choose_pairs(verified, config.seed)
        split, split_report = assign_splits(pairs, config.seed, config.test_size)
        records = build_records(pairs, split)
        if progress:
            progress("gates", 0, 1)
        gate_report = (gate or _default_gate)(*records, con)
    finally:
        con.close()
    manifest = manifest_of(config, source, templates, chosen, inst, rejected, split_report, records[1], sum(map(len, verified.values())))
    gates_json = json.dumps(gate_report.to_json_dict(), indent=1, sort_keys=True, default=str) + "\n"
    return publish_release(config.releases_dir, config.version, *records, manifest, extras={"gates.json": gates_json})


def _default_gate(tasks, labels, patches, con):
    from pipeline.quality.pair_gate import gate_release  # Great Expectations loads only when a build gates

    return gate_release(tasks, labels, patches, con)
