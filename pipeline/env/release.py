"""Open a published release against its source database: checked files, agent-visible tasks, hidden labels, episodes."""

from __future__ import annotations

import hashlib
import json
import weakref
from pathlib import Path
from typing import Any

import duckdb

from pipeline import jsonl
from pipeline.env.gateway import Gateway, Limits, open_locked
from pipeline.release.records import LabelRecord, PatchRecord, TaskRecord
from pipeline.release.scoring import read_scoring_templates, scoring_drift
from pipeline.templates.spec import Template


def _registry_template(template_id: str, version: int, release: str) -> Template:
    from pipeline.env.verifier import registry_template

    template = registry_template(template_id)
    if template.spec.version != version:
        raise ValueError(
            f"release {release} (published before scoring/) uses template {template_id!r} v{version}, "
            f"the registry has v{template.spec.version}; score it with a checkout of that version"
        )
    return template


class ReleaseError(ValueError):
    """The release folder or the source database does not match the manifest."""


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / "manifest.json"
    if not path.is_file():
        raise ReleaseError(f"{path}: no manifest.json; is {root} a release folder?")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ReleaseError(f"{path}: not valid JSON ({err})") from None


def _check_hashes(root: Path, manifest: dict[str, Any]) -> None:
    files = manifest.get("files") or {}
    for name in ("tasks.jsonl", "labels.jsonl", "patches/patches.jsonl"):
        if name not in files:
            raise ReleaseError(f"{root / 'manifest.json'}: 'files' has no entry for {name}")
    for name, entry in files.items():
        path = root / name
        if not path.is_file():
            raise ReleaseError(f"{path}: listed in the manifest but missing")
        if hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            raise ReleaseError(f"{path}: sha256 differs from manifest.json (the release was modified)")


def _check_source(con, manifest: dict[str, Any], db: Path, fingerprint: bool) -> None:
    from pipeline.build import source_fingerprint  # heavy import, only when a release opens

    expected = manifest.get("source") or {}
    hint = f"pass --db PATH of the database with source fingerprint {str(expected.get('fingerprint'))[:12]}"
    found = source_fingerprint(con) if fingerprint else None
    rows = (
        found["rows"]
        if found
        else {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in expected.get("rows", {})}
    )
    for table, count in (expected.get("rows") or {}).items():
        if rows.get(table) != count:
            raise ReleaseError(
                f"{db}: table {table} has {rows.get(table)} rows, the release expects {count}: "
                f"not the database this release was built on; {hint}"
            )
    if found and found["fingerprint"] != expected.get("fingerprint"):
        raise ReleaseError(
            f"{db}: source fingerprint {found['fingerprint'][:12]} differs from the release's "
            f"{str(expected.get('fingerprint'))[:12]}: not the database this release was built on; "
            f"{hint}"
        )


def find_source(root: Path, manifest: dict[str, Any], db: Path | None) -> Path:
    """`db` when given, else the source path the manifest recorded at build time; a missing file raises
    ReleaseError saying what to pass."""
    source = manifest.get("source") or {}
    expected = f"the database with source fingerprint {str(source.get('fingerprint'))[:12]}"
    if db is not None:
        if not Path(db).is_file():
            raise ReleaseError(f"--db {db}: source database not found; pass --db PATH of {expected}")
        return Path(db)
    if not source.get("path"):
        raise ReleaseError(
            f"{root / 'manifest.json'} records no source path (published before it did); "
            f"pass --db PATH of {expected} ({source.get('database')})"
        )
    if not Path(source["path"]).is_file():
        raise ReleaseError(
            f"{source['path']}: the source database recorded in {root / 'manifest.json'} is not there "
            f"(moved or deleted); pass --db PATH of {expected} ({source.get('database')})"
        )
    return Path(source["path"])


def release_source(release_dir: Path, db: Path | None = None) -> Path:
    """The source database a release opens on: `db`, or the path its manifest recorded (ReleaseError otherwise)."""
    return find_source(Path(release_dir), _read_manifest(Path(release_dir)), db)


def _executor(db: Path, limits: Limits):
    from pipeline.env.episode import SHADOW_TABLES
    from pipeline.env.executor import Executor

    return Executor(db, limits, SHADOW_TABLES)


class Release:
    """A release opened on its source: tasks (agent-visible), labels (server side only) and episodes."""

    def __init__(
        self,
        root: Path,
        manifest: dict[str, Any],
        tasks: list[TaskRecord],
        labels: list[LabelRecord],
        patches: list[PatchRecord],
        con,
        limits: Limits,
        templates: dict[tuple[str, int], Template] | None = None,
        executor=None,
    ):
        self.root, self.manifest, self.limits, self._con = root, manifest, limits, con
        self.executor = executor  # pipeline.env.executor.Executor: agent SQL in a child process, or None (in process)
        self._tasks = sorted(tasks, key=lambda t: t.task_id)
        self._by_id = {t.task_id: t for t in self._tasks}
        self._labels = {lab.task_id: lab for lab in labels}
        self._patches = {p.noise_task_id: p.patch for p in patches}
        self.functions = Gateway.functions_of(con)
        self._templates = templates  # scoring/templates by (id, version); None: published before scoring/
        self._episodes: weakref.WeakSet = weakref.WeakSet()  # open episodes: their cursors keep the source open

    @classmethod
    def open(
        cls,
        release_dir: Path,
        source_db: Path | None = None,
        limits: Limits | None = None,
        check_fingerprint: bool = True,
        isolate: bool = False,
    ) -> Release:
        """Read and check a release folder, and open its source read-only and locked: `source_db`, or the
        source path the manifest recorded (see find_source). `isolate`: episodes' SQL runs in a child process
        (pipeline.env.executor), so no query can crash or stall the caller."""
        root = Path(release_dir)
        manifest = _read_manifest(root)
        _check_hashes(root, manifest)
        db = find_source(root, manifest, source_db)
        tasks, labels = (
            jsonl.read(root / "tasks.jsonl", TaskRecord, ReleaseError),
            jsonl.read(root / "labels.jsonl", LabelRecord, ReleaseError),
        )
        patches = jsonl.read(root / "patches" / "patches.jsonl", PatchRecord, ReleaseError)
        try:
            templates = read_scoring_templates(root)
        except ValueError as err:
            raise ReleaseError(str(err)) from None
        limits = limits or Limits()
        try:
            con = open_locked(db, limits)
        except duckdb.ConnectionException as exc:  # DuckDB shares one instance per file and process
            raise ReleaseError(
                f"{db}: already open in this process with another configuration (a plain connection, or a "
                f"release with other limits); close it, or read through release.source_cursor() ({exc})"
            ) from exc
        try:
            _check_source(con, manifest, db, check_fingerprint)
        except BaseException:
            con.close()
            raise
        return cls(
            root, manifest, tasks, labels, patches, con, limits, templates, _executor(db, limits) if isolate else None
        )

    @property
    def version(self) -> str:
        return str(self.manifest.get("version", self.root.name))

    def tasks(self, split: str | None = None) -> list[TaskRecord]:
        """Agent-visible records in task-id order, optionally of one split."""
        if split is None:
            return list(self._tasks)
        splits = sorted({t.split for t in self._tasks})
        if split not in splits:
            raise ValueError(f"release {self.version} has no split {split!r}; it has {splits}")
        return [t for t in self._tasks if t.split == split]

    def task(self, task_id: str) -> TaskRecord:
        if task_id not in self._by_id:
            raise KeyError(f"release {self.version} has no task {task_id!r}")
        return self._by_id[task_id]

    def label(self, task_id: str) -> LabelRecord:
        """The hidden label of a task (server side only)."""
        if task_id not in self._labels:
            raise KeyError(f"release {self.version} has no label for task {task_id!r}")
        return self._labels[task_id]

    def template(self, label_or_id: LabelRecord | str, version: int | None = None) -> Template:
        """The template a label (or template id and version) was built from, as the release carries it in
        `scoring/`; a release published before `scoring/` falls back to the registry, which must hold that version."""
        if isinstance(label_or_id, LabelRecord):
            template_id, version = label_or_id.template_id, label_or_id.template_version
        else:
            template_id = label_or_id
        if version is None:
            raise TypeError(f"Release.template({template_id!r}): give the template version (or a label)")
        if self._templates is None:  # published before scoring/: the checkout's template of the same version
            return _registry_template(template_id, version, self.version)
        if (template_id, version) not in self._templates:
            raise ReleaseError(
                f"{self.root / 'scoring'}: release {self.version} carries no template {template_id} v{version}"
            )
        return self._templates[(template_id, version)]

    def scoring_drift(self) -> list[str]:
        """Where the checkout's verifier rules or unit tables differ from those the release recorded."""
        return scoring_drift(self.root)

    def episode(self, task_id: str, max_turns: int = 30):
        """A fresh episode of the task: its own cursor, with the task's patch applied as an overlay if it has one."""
        from pipeline.env.episode import Episode

        cursor = self._con.cursor() if self.executor is None else None
        episode = Episode(
            self.task(task_id),
            cursor,
            self._patches.get(task_id),
            self.functions,
            self.limits,
            max_turns,
            self.executor,
        )
        self._episodes.add(episode)
        return episode

    def source_cursor(self):
        """A plain cursor on the source (server side only: no gateway, no overlay). DuckDB refuses a second
        connection to the same file with another configuration in one process, so raw reads go through this."""
        return self._con.cursor()

    def close(self) -> None:
        """Close every episode still open (a cursor left open keeps DuckDB's instance of the source file, with
        this release's configuration, alive in the process), the executor and the connection."""
        for episode in list(self._episodes):
            episode.close()
        if self.executor is not None:
            self.executor.shutdown()
        self._con.close()

    def __enter__(self) -> Release:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
