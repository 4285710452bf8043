"""Release build stages that pass paths: each reads its inputs from files and writes its output once, atomically.

Every stage writes into the build's work folder `RELEASES_DIR/.work/<version>-<key>/`, where the key hashes the
build config, the source database file (path, size, mtime), the templates and the package version. A stage whose
output already exists there returns it without recomputing, so a retried or rerun task (Airflow) or a rerun
build resumes where the last one stopped and never duplicates work. Publishing is the only step that touches
`RELEASES_DIR/<version>`, by one rename; the work folder is removed once the release is in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

import pipeline
from pipeline import jsonl
from pipeline.atomic import atomic_output
from pipeline.build import (
    BuildConfig,
    Progress,
    build_records,
    cap_per_cell,
    manifest_of,
    select_subtypes,
    select_templates,
    source_fingerprint,
)
from pipeline.db import open_source
from pipeline.noise.verify import NoisePair
from pipeline.release.fill import fill_cells
from pipeline.release.pairs import choose_pairs
from pipeline.release.plan import planned_pairs
from pipeline.release.publish import publish_release
from pipeline.release.records import LabelRecord, PatchRecord, TaskRecord
from pipeline.release.splits import assign_splits
from pipeline.source.snapshot import ensure_snapshot
from pipeline.stage_table import SHARDED_VALUES, STAGE_TABLE
from pipeline.templates.instantiate import CleanTask, InstantiationReport, instantiate
from pipeline.templates.spec import INTENTS, Template

ALL = "all"  # the shard holding every selected template (one-process builds)


# ---------------------------------------------------------------- work folder and stage outputs


def tree_digest(root: Path) -> str:
    """sha256 over the relative paths and bytes of every file under `root` (the templates' content)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _file_identity(db: Path) -> list:
    """Resolved path, size and mtime of a source database: a rebuilt or reloaded file gets a new identity."""
    if not Path(db).is_file():
        raise FileNotFoundError(f"{db}: no such source database file (BuildConfig.db)")
    stat = Path(db).stat()
    return [str(Path(db).resolve()), stat.st_size, stat.st_mtime_ns]


def build_key(config: BuildConfig) -> str:
    """A digest of everything a stage output depends on: config, source file, templates, package version."""
    payload = {
        "config": config.model_dump(mode="json"),
        "db": _file_identity(config.db),
        "templates": tree_digest(config.templates_dir),
        "ehrgym": pipeline.__version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def work_dir(config: BuildConfig) -> Path:
    return Path(config.releases_dir) / ".work" / f"{config.version}-{build_key(config)}"


def produce(final: Path, write: Callable[[Path], object]) -> Path:
    """`final` when an earlier attempt finished it; otherwise `write(tmp)` and rename tmp onto `final`."""
    if final.exists():
        return final
    try:
        with atomic_output(final) as tmp:
            write(tmp)
    except FileExistsError:
        if not final.exists():
            raise
    return final


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def load_config(work: Path) -> BuildConfig:
    path = Path(work) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no build config; run the prepare stage first")
    return BuildConfig.model_validate_json(path.read_text())


# ---------------------------------------------------------------- the source database


class SourceSpec(BaseModel):
    """Where a source database comes from: a synthetic MIMIC-IV (patients, seed) or a MIMIC-IV folder."""

    model_config = ConfigDict(extra="forbid")
    source: str = "synthetic"  # "synthetic" or the path of a MIMIC-IV folder (hosp/, icu/)
    patients: int = Field(default=1000, ge=1)
    seed: int = 0
    substitutes: dict[str, Path] = {}  # MIMIC-IV folder: substitute files by table (e.g. the demo's chartevents)

    @property
    def synthetic(self) -> bool:
        return self.source == "synthetic"

    @property
    def label(self) -> str:
        return f"synthetic-{self.patients}-seed{self.seed}" if self.synthetic else Path(self.source).name


def folder_stamp(spec: SourceSpec) -> str:
    """Relative path, size and mtime of every file of a MIMIC-IV folder and its substitutes, as one digest."""
    folder, digest = Path(spec.source), hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file()) + [
        Path(spec.substitutes[k]) for k in sorted(spec.substitutes)
    ]
    for path in files:
        stat = path.stat()
        digest.update(
            (
                f"{path.relative_to(folder) if path.is_relative_to(folder) else path}:"
                f"{stat.st_size}:{stat.st_mtime_ns};"
            ).encode()
        )
    return digest.hexdigest()


def source_db(spec: SourceSpec, data_dir: Path) -> Path:
    """`data_dir/<label>.duckdb`, built when absent; a MIMIC-IV folder's database is reloaded (atomically) when
    the folder's files changed since the last load. A synthetic database never changes for the same spec."""
    db = Path(data_dir) / f"{spec.label}.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    if spec.synthetic:
        if not db.exists():
            from pipeline.source.synthetic import generate_synthetic

            generate_synthetic(db, spec.patients, spec.seed)
        return db
    if not Path(spec.source).is_dir():
        raise FileNotFoundError(
            f"{spec.source}: not a MIMIC-IV folder (source must be 'synthetic' or a folder with hosp/ and icu/)"
        )
    stamp_path, stamp = db.with_name(db.name + ".stamp"), folder_stamp(spec)
    if db.exists() and stamp_path.is_file() and stamp_path.read_text() == stamp:
        return db
    from pipeline.source.loader import load_mimic

    load_mimic(Path(spec.source), db, substitutes=spec.substitutes, overwrite=db.exists())
    with atomic_output(stamp_path, overwrite=True) as tmp:
        tmp.write_text(stamp)
    return db


# ---------------------------------------------------------------- shards


def shard_names(config: BuildConfig, template_shards: int = 1) -> list[str]:
    """One shard per intent with selected templates, each split into up to `template_shards` parts."""
    if template_shards < 1:
        raise ValueError(f"template_shards must be at least 1, got {template_shards}")
    per_intent = Counter(t.spec.intent for t in select_templates(config))
    names = []
    for intent in (i for i in INTENTS if per_intent[i]):
        parts = min(template_shards, per_intent[intent])
        names += [intent] if parts == 1 else [f"{intent}.{i}of{parts}" for i in range(parts)]
    return names


def shard_templates(config: BuildConfig, shard: str) -> list[Template]:
    """The templates of a shard: `all`, `<intent>` or `<intent>.<i>of<n>` (every n-th template from the i-th)."""
    templates = select_templates(config)
    if shard == ALL:
        return templates
    intent, _, part = shard.partition(".")
    chosen = [t for t in templates if t.spec.intent == intent]
    if part:
        index, _, parts = part.partition("of")
        if not (index.isdigit() and parts.isdigit() and int(index) < int(parts)):
            raise ValueError(f"shard {shard!r}: expected '<intent>.<i>of<n>' with i < n")
        chosen = chosen[int(index) :: int(parts)]
    if not chosen:
        raise ValueError(f"shard {shard!r} selects no template (intents {config.intents}, scopes {config.scopes})")
    return chosen


# ---------------------------------------------------------------- stages


def prepare(config: BuildConfig) -> Path:
    """Create the work folder of this build and record its config there."""
    work = work_dir(config)
    produce(work / "config.json", lambda tmp: tmp.write_text(config.model_dump_json(indent=1) + "\n"))
    return work


def source_gate(work: Path, progress: Progress | None = None) -> Path:
    """The Great Expectations source gate on the build's database; raises GateFailed when a suite fails.

    The report belongs to the database, not to one build: it is kept beside it, keyed by the file (path, size,
    mtime) and the suites, so further builds on the same database reuse it (in the work folder when the
    database's folder is read-only)."""
    from pipeline.quality.pair_gate import GateFailed
    from pipeline.quality.source_gate import DEFAULT_SUITES, validate_source

    if progress:
        progress("source", 0, 1)
    db = load_config(work).db
    key = hashlib.sha256(json.dumps([_file_identity(db), tree_digest(DEFAULT_SUITES)]).encode()).hexdigest()[:16]
    folder = Path(db).parent if os.access(Path(db).parent, os.W_OK) else Path(work)

    def write(tmp: Path) -> None:
        report = validate_source(db)
        if not report.success:
            raise GateFailed(report)
        tmp.write_text(json.dumps(report.to_json_dict(), indent=1, sort_keys=True, default=str) + "\n")

    return produce(folder / f"{Path(db).stem}.source-gate-{key}.json", write)


def fingerprint(work: Path) -> Path:
    """Row counts, content digest and absolute path of the source database (source.json); `ehrgym eval` and
    `ehrgym serve` find the source at that path when not given one."""

    def write(tmp: Path) -> None:
        config = load_config(work)
        with open_source(config.db) as con:
            source = {
                "database": Path(config.db).name,
                "path": str(Path(config.db).resolve()),
                **source_fingerprint(con),
            }
        tmp.write_text(json.dumps(source, indent=1, sort_keys=True) + "\n")

    return produce(Path(work) / "source.json", write)


def instantiate_shard(work: Path, shard: str, progress: Progress | None = None, workers: int = 1) -> Path:
    """Clean tasks of one shard: `tasks/<shard>/tasks.jsonl` and its instantiation `report.json`; `workers`
    processes instantiate its templates (the result does not depend on it)."""

    def write(tmp: Path) -> None:
        config = load_config(work)
        templates = shard_templates(config, shard)
        done = iter(range(1, len(templates) + 1))
        with open_source(config.db) as con:
            tasks, report = instantiate(
                con,
                templates,
                config.per_template,
                config.seed,
                on_template=lambda t, n: progress and progress("tasks", next(done), len(templates)),
                workers=workers,
                snapshot=ensure_snapshot(config.db),
            )
        jsonl.write(tmp / "tasks.jsonl", tasks)
        _write_text(tmp / "report.json", report.model_dump_json(indent=1) + "\n")

    return produce(Path(work) / "tasks" / shard, write)


def pair_shard(work: Path, tasks_dir: Path, progress: Progress | None = None, workers: int = 1) -> Path:
    """A shard's verified pairs, planned first (`pipeline.release.plan`: at most one per clean task,
    `pairs/<shard>/pairs.jsonl`), the counted rejections and the plan's report (`plan.json`); `workers` processes
    verify them (the result does not depend on it)."""

    def write(tmp: Path) -> None:
        config = load_config(work)
        tasks = jsonl.read(Path(tasks_dir) / "tasks.jsonl", CleanTask)
        by_id = {t.id: t for t in shard_templates(config, Path(tasks_dir).name)}
        with open_source(config.db) as con:
            verified, rejected, report = planned_pairs(
                con,
                tasks,
                by_id,
                select_subtypes(config),
                config.seed,
                on_attempt=lambda done, planned: progress and progress("pairs", done, planned),
                workers=workers,
                per_cell=config.pairs_per_cell,
                snapshot=ensure_snapshot(config.db),
            )
        jsonl.write(tmp / "pairs.jsonl", (p for task_id in sorted(verified) for p in verified[task_id]))
        _write_text(tmp / "rejected.json", json.dumps(sorted([*key, n] for key, n in rejected.items())) + "\n")
        _write_text(tmp / "plan.json", report.model_dump_json(indent=1) + "\n")

    return produce(Path(work) / "pairs" / Path(tasks_dir).name, write)


def merged_report(tasks_dirs: Iterable[Path]) -> InstantiationReport:
    """The instantiation reports of all shards as one (shards hold disjoint templates)."""
    merged = InstantiationReport()
    for tasks_dir in tasks_dirs:
        part = InstantiationReport.model_validate_json((Path(tasks_dir) / "report.json").read_text())
        merged.kept |= part.kept
        merged.dropped |= part.dropped
        merged.shortfall |= part.shortfall
        merged.compared += part.compared
        merged.agreed += part.agreed
    return merged


def merged_pairs(pairs_dirs: Iterable[Path]) -> tuple[dict[str, list[NoisePair]], Counter]:
    """Verified pairs by clean task id (in sub-type order, as candidate_pairs gives them) and all rejections."""
    verified: dict[str, list[NoisePair]] = {}
    rejected: Counter = Counter()
    for pairs_dir in pairs_dirs:
        for pair in jsonl.read(Path(pairs_dir) / "pairs.jsonl", NoisePair):
            verified.setdefault(pair.clean.task_id, []).append(pair)
        for template_id, subtype, reason, n in json.loads((Path(pairs_dir) / "rejected.json").read_text()):
            rejected[(template_id, subtype, reason)] += n
    return verified, rejected


def fill(
    work: Path, tasks_dirs: list[Path], pairs_dirs: list[Path], progress: Progress | None = None, workers: int = 1
) -> Path:
    """Pairs for the intent x sub-type cells that no shard's pair covers, from further clean tasks
    (`filled/pairs.jsonl`, `rejected.json` as a shard's, `cells.json`: what each cell took, and `report.json`: the
    further draw's instantiation report); `workers` processes draw and verify them (the files do not depend on it)."""

    def write(tmp: Path) -> None:
        config = load_config(work)
        verified, _ = merged_pairs(pairs_dirs)
        tasks = [t for tasks_dir in tasks_dirs for t in jsonl.read(Path(tasks_dir) / "tasks.jsonl", CleanTask)]
        drawing = InstantiationReport()
        with open_source(config.db) as con:
            found, rejected, cells = fill_cells(
                con,
                tasks,
                verified,
                select_templates(config),
                select_subtypes(config),
                config.seed,
                draw=config.fill_tasks,
                want=config.per_template,
                drawing=drawing,
                on_cell=lambda n, total: progress and progress("fill", n, total),
                snapshot=ensure_snapshot(config.db),
                workers=workers,
            )
        jsonl.write(tmp / "pairs.jsonl", (p for task_id in sorted(found) for p in found[task_id]))
        _write_text(tmp / "rejected.json", json.dumps(sorted([*key, n] for key, n in rejected.items())) + "\n")
        _write_text(tmp / "cells.json", json.dumps({k: v.model_dump() for k, v in cells.items()}, indent=1) + "\n")
        _write_text(tmp / "report.json", drawing.model_dump_json(indent=1) + "\n")

    return produce(Path(work) / "filled", write)


def assemble(work: Path, source: Path, tasks_dirs: list[Path], pairs_dirs: list[Path], filled: Path) -> Path:
    """Merge the shards and the filled cells, choose one pair per clean task, cap cells, split, and write the
    release records and the manifest (without file hashes) to `assembled/`."""

    def write(tmp: Path) -> None:
        config = load_config(work)
        verified, rejected = merged_pairs([*pairs_dirs, filled])
        pairs = cap_per_cell(choose_pairs(verified, config.seed), config.pairs_per_cell, config.seed)
        split, split_report = assign_splits(pairs, config.seed, config.test_size)
        templates = select_templates(config)
        tasks, labels, patches = build_records(pairs, split, templates)
        manifest = manifest_of(
            config,
            json.loads(Path(source).read_text()),
            templates,
            select_subtypes(config),
            merged_report(tasks_dirs),
            rejected,
            split_report,
            labels,
            sum(map(len, verified.values())),
            json.loads((Path(filled) / "cells.json").read_text()),
            InstantiationReport.model_validate_json((Path(filled) / "report.json").read_text()),
        )
        for name, records in (("tasks", tasks), ("labels", labels), ("patches", patches)):
            jsonl.write(tmp / f"{name}.jsonl", records)
        _write_text(tmp / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    return produce(Path(work) / "assembled", write)


def read_records(assembled: Path) -> tuple[list[TaskRecord], list[LabelRecord], list[PatchRecord]]:
    return (
        jsonl.read(assembled / "tasks.jsonl", TaskRecord),
        jsonl.read(assembled / "labels.jsonl", LabelRecord),
        jsonl.read(assembled / "patches.jsonl", PatchRecord),
    )


def pair_gate(work: Path, assembled: Path, gate: Callable | None = None, progress: Progress | None = None) -> Path:
    """The pair gate (`gate(tasks, labels, patches, con)`, default the GX pair gate) on the assembled records:
    it raises to stop the export; its report becomes the release's gates.json."""
    if progress:
        progress("gates", 0, 1)

    def write(tmp: Path) -> None:
        config = load_config(work)
        with open_source(config.db) as con:
            report = (gate or default_gate)(*read_records(Path(assembled)), con)
        tmp.write_text(json.dumps(report.to_json_dict(), indent=1, sort_keys=True, default=str) + "\n")

    return produce(Path(work) / "gates.json", write)


def publish(work: Path, assembled: Path, gates: Path) -> Path:
    """Render the release in the work folder, then rename it to `RELEASES_DIR/<version>`. A version that is
    already there is returned when its manifest is the one this build makes, and refused otherwise."""
    config, work = load_config(work), Path(work)
    final, rendered = Path(config.releases_dir) / config.version, work / "staged" / config.version
    if not rendered.is_dir():
        shutil.rmtree(work / "staged", ignore_errors=True)  # emptied by the rename of an attempt that died after it
    templates = select_templates(config)  # the build's; those the labels use are carried in scoring/
    produce(work / "staged", lambda tmp: _render(tmp, config.version, Path(assembled), Path(gates), templates))
    if final.exists():
        if (final / "manifest.json").read_bytes() != (rendered / "manifest.json").read_bytes():
            raise FileExistsError(f"{final} already exists with a different manifest; versions are never overwritten")
    else:
        os.rename(rendered, final)  # same file system: the release appears whole, in one step
    discard_work(work)
    return final


def discard_work(work: Path) -> None:
    """Remove a published build's work folder (and `.work` when it was the last build there)."""
    shutil.rmtree(work, ignore_errors=True)
    try:
        Path(work).parent.rmdir()
    except OSError:
        pass  # other builds are in progress (or were interrupted) here


def _render(tmp: Path, version: str, assembled: Path, gates: Path, templates: list[Template]) -> None:
    manifest = json.loads((assembled / "manifest.json").read_text())
    publish_release(
        tmp, version, *read_records(assembled), manifest, extras={"gates.json": gates.read_text()}, templates=templates
    )


def default_gate(tasks, labels, patches, con):
    from pipeline.quality.pair_gate import gate_release  # Great Expectations loads only when a build gates

    return gate_release(tasks, labels, patches, con)


def run_stages(
    config: BuildConfig,
    shards: list[str] | None = None,
    progress: Progress | None = None,
    gate: Callable | None = None,
    workers: int = 1,
    skip: tuple[str, ...] = (),
) -> Path:
    """Every stage of `pipeline.stage_table` in its order, in this process (the release's path); `shards`
    defaults to one shard of all templates, `workers` processes verify the pairs, `skip` names gates left out."""
    wrong = sorted(set(skip) - {stage.name for stage in STAGE_TABLE if stage.gate})
    if wrong:
        raise ValueError(f"run_stages: only gates can be skipped, not {wrong}")
    values: dict[str, Any] = {"config": config, "shard": shards or [ALL]}
    options = {"progress": progress, "workers": workers, "gate": gate}
    for stage in STAGE_TABLE:
        if stage.name in skip:
            continue
        run, kwargs = globals()[stage.function], {name: options[name] for name in stage.options}
        if stage.per_shard:
            values[stage.output] = [
                run(*(values[i][k] if i in SHARDED_VALUES else values[i] for i in stage.inputs), **kwargs)
                for k in range(len(values["shard"]))
            ]
        else:
            values[stage.output] = run(*(values[i] for i in stage.inputs), **kwargs)
    return values[STAGE_TABLE[-1].output]


def run_build(
    config: BuildConfig,
    progress: Progress | None = None,
    gate: Callable | None = None,
    *,
    workers: int = 1,
    skip_source_gate: bool = False,
) -> Path:
    """Build and publish `releases_dir/version`: every stage, the source gate included unless skipped.
    `gate(tasks, labels, patches, con)` returns a report (published as gates.json) or raises to stop the export;
    by default the pair gate of `pipeline.quality.pair_gate`. `workers` processes verify the pairs (same files for
    any number)."""
    if (Path(config.releases_dir) / config.version).exists():
        raise FileExistsError(
            f"{Path(config.releases_dir) / config.version} already exists; versions are never overwritten"
        )
    return run_stages(
        config, progress=progress, gate=gate, workers=workers, skip=("source_gate",) if skip_source_gate else ()
    )
