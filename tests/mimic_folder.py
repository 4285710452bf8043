"""Build small MIMIC-IV folders (PhysioNet layout) for loader tests: every table, header plus given rows."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

from pipeline.source.schema import load_schema


def write_table(root: Path, table: str, lines: list[str], header: str | None = None, gz: bool = True) -> Path:
    spec = load_schema()[table]
    path = root / f"{spec.relative_path}.csv{'.gz' if gz else ''}"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join([header or ",".join(spec.column_names), *lines]) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)
    return path


def make_folder(root: Path, rows: dict[str, list[str]] | None = None) -> Path:
    """A complete 31-table folder; `rows` gives CSV lines (without header) for some tables."""
    rows = rows or {}
    for name in load_schema():
        write_table(root, name, rows.get(name, []))
    return root


def write_checksums(root: Path) -> None:
    lines = []
    for path in sorted(root.rglob("*.csv*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{digest} {path.relative_to(root).as_posix()}")
    (root / "SHA256SUMS.txt").write_text("\n".join(lines) + "\n")
