"""Publish a release folder atomically: JSONL and Parquet of tasks and labels, patches, scoring/, card, manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import polars as pl

from pipeline import jsonl
from pipeline.atomic import atomic_output
from pipeline.release.card import SPLITS, dataset_card
from pipeline.release.records import LabelRecord, PatchRecord, TaskRecord
from pipeline.release.report import release_report
from pipeline.release.scoring import write_scoring
from pipeline.templates.spec import Template

JSON_FIELDS = (
    "slots",
    "expected",
    "evidence",
    "inspect",
    "naive_answer",
    "accepted",
)  # shapes vary: JSON text in Parquet
ANSWER_FORMAT = pl.Struct({"type": pl.String, "unit": pl.String, "ordered": pl.Boolean, "records": pl.List(pl.String)})
TASK_SCHEMA = {name: pl.String for name in TaskRecord.model_fields} | {"answer_format": ANSWER_FORMAT}
LABEL_SCHEMA = {
    **{name: pl.String for name in LabelRecord.model_fields if name not in JSON_FIELDS},
    "template_version": pl.Int64,
    "subtype_version": pl.Int64,
    "subject_id": pl.Int64,
    "trap": pl.Boolean,
    **{f"{name}_json": pl.String for name in JSON_FIELDS},
}


def _parquet(path: Path, rows: list[dict[str, Any]], schema: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    frame.write_parquet(path, compression="zstd", statistics=False)


def _write_parquets(root: Path, tasks: list[TaskRecord], labels: list[LabelRecord]) -> None:
    for split in SPLITS:
        _parquet(
            root / "tasks" / f"{split}.parquet",
            [t.model_dump(mode="json") for t in tasks if t.split == split],
            TASK_SCHEMA,
        )
        rows = [
            {
                (f"{k}_json" if k in JSON_FIELDS else k): (json.dumps(v, sort_keys=True) if k in JSON_FIELDS else v)
                for k, v in lab.model_dump(mode="json").items()
            }
            for lab in labels
            if lab.split == split
        ]
        _parquet(root / "labels" / f"{split}.parquet", rows, LABEL_SCHEMA)


def file_hashes(root: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file under root except the manifest, by relative path."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"):
        out[path.relative_to(root).as_posix()] = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "bytes": path.stat().st_size,
        }
    return out


def publish_release(
    releases_dir: Path,
    version: str,
    tasks: list[TaskRecord],
    labels: list[LabelRecord],
    patches: list[PatchRecord],
    manifest: dict[str, Any],
    extras: dict[str, str] | None = None,
    *,
    templates: list[Template],
) -> Path:
    """Write `releases_dir/version` whole, or not at all; an existing version is never touched.
    `extras` are further text files (e.g. the gate report) written into the release and hashed; `templates` are
    the build's, of which those the labels use are carried in `scoring/` (with the verifier's rules)."""
    final = Path(releases_dir) / version
    tasks, labels = sorted(tasks, key=lambda t: t.task_id), sorted(labels, key=lambda lab: lab.task_id)
    with atomic_output(final) as root:
        root.mkdir(parents=True)
        jsonl.write(root / "tasks.jsonl", tasks)
        jsonl.write(root / "labels.jsonl", labels)
        by_pair: list[PatchRecord] = sorted(patches, key=lambda p: p.pair_id)
        jsonl.write(root / "patches" / "patches.jsonl", by_pair)
        _write_parquets(root, tasks, labels)
        used = {lab.template_id: lab.template_version for lab in labels}
        manifest = {**manifest, "scoring": write_scoring(root, templates, used)}
        label_dicts = [lab.model_dump() for lab in labels]
        (root / "README.md").write_text(dataset_card(version, manifest, label_dicts))
        (root / "report.html").write_text(release_report(version, manifest, label_dicts))
        for name, text in (extras or {}).items():
            (root / name).write_text(text)
        manifest = {**manifest, "files": file_hashes(root)}
        (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return final
