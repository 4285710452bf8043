"""Load a MIMIC-IV folder (PhysioNet layout, `hosp/*.csv[.gz]`, `icu/*.csv[.gz]`) into one DuckDB file."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from pipeline.atomic import atomic_output
from pipeline.db import scalar
from pipeline.source.schema import Table, load_schema

EXTENSIONS = (".csv.gz", ".csv")
CHECKSUM_FILE = "SHA256SUMS.txt"
_LINE_RE = re.compile(r"CSV Error on Line: (\d+)")
_COLUMN_RE = re.compile(r'converting column "([^"]+)"')
_CONVERT_RE = re.compile(r"(Could not convert string .*? to '[A-Z0-9_ ]+')")

TableCallback = Callable[[str, int, int], None]  # (table, rows, file bytes)


class LoadError(Exception):
    """A MIMIC-IV folder cannot be loaded; the message names the file, line or column at fault."""


@dataclass
class LoadReport:
    """What a load produced: rows per table, tables that were absent, where each table came from."""

    db_path: Path
    rows: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    checksums_verified: int = 0
    seconds: float = 0.0

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def locate_files(mimic_dir: Path, substitutes: Mapping[str, Path]) -> tuple[dict[str, Path], list[str]]:
    """Find each table's file (`module/name.csv.gz` or `.csv`, or its substitute); list the absent ones."""
    schema = load_schema()
    unknown = sorted(set(substitutes) - set(schema))
    if unknown:
        raise LoadError(f"--table names unknown table(s) {unknown}; expected one of the 31 MIMIC-IV tables")
    found, missing = {}, []
    for name, table in schema.items():
        if name in substitutes:
            path = Path(substitutes[name])
            if not path.is_file():
                raise LoadError(f"substitute file for table {name!r} does not exist: {path}")
            found[name] = path
            continue
        candidates = [mimic_dir / f"{table.relative_path}{ext}" for ext in EXTENSIONS]
        present = [p for p in candidates if p.is_file()]
        if present:
            found[name] = present[0]
        else:
            missing.append(name)
    return found, missing


def read_checksums(mimic_dir: Path) -> dict[str, str]:
    """`SHA256SUMS.txt` as {relative path: hex digest}; empty when the folder has none."""
    path = mimic_dir / CHECKSUM_FILE
    if not path.is_file():
        return {}
    sums = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-fA-F]{64}", parts[0]):
            raise LoadError(f"{path}: line {number}: expected '<sha256> <path>', got {line!r}")
        sums[parts[1].strip().lstrip("*")] = parts[0].lower()
    return sums


def sha256_of(path: Path, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checksums(mimic_dir: Path, files: Mapping[str, Path], substitutes: Mapping[str, Path]) -> int:
    """Check every table file listed in SHA256SUMS.txt (substitutes are not listed); return how many."""
    sums = read_checksums(mimic_dir)
    verified = 0
    for name, path in files.items():
        if name in substitutes:
            continue
        relative = path.relative_to(mimic_dir).as_posix()
        if relative not in sums:
            continue
        actual = sha256_of(path)
        if actual != sums[relative]:
            raise LoadError(f"{path}: checksum mismatch: SHA256SUMS.txt lists {sums[relative]}, the file has {actual}")
        verified += 1
    return verified


def read_header(path: Path) -> list[str]:
    """The file's header line as lower-cased column names; a corrupt gzip is named as such."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as handle:
            line = handle.readline()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise LoadError(f"{path}: cannot read the file (corrupt or not gzip?): {exc}") from exc
    if not line.strip():
        raise LoadError(f"{path}: empty file, expected a CSV header line")
    return [name.strip().strip('"').lower() for name in line.rstrip("\r\n").split(",")]


def check_header(table: Table, header: list[str], path: Path) -> None:
    """The header must hold exactly the table's columns (any order, any case)."""
    expected = set(table.column_names)
    missing = [c for c in table.column_names if c not in header]
    unexpected = [c for c in header if c not in expected]
    duplicated = sorted({c for c in header if header.count(c) > 1})
    if missing or unexpected or duplicated:
        problems = []
        if missing:
            problems.append(f"missing column(s) {missing}")
        if unexpected:
            problems.append(f"unexpected column(s) {unexpected}")
        if duplicated:
            problems.append(f"duplicated column(s) {duplicated}")
        raise LoadError(
            f"{path}: line 1: wrong header for table {table.name!r}: {'; '.join(problems)}; "
            f"expected {list(table.column_names)}"
        )


def _describe_duckdb_error(path: Path, table: Table, exc: duckdb.Error) -> str:
    text = str(exc)
    line, column, convert = _LINE_RE.search(text), _COLUMN_RE.search(text), _CONVERT_RE.search(text)
    if line and column:
        col = table.column(column.group(1))
        what = convert.group(1) if convert else "bad value"
        return f"{path}: line {line.group(1)}: column {col.name!r} ({col.ddl_type}): {what}"
    if "GZIP" in text.upper() or "gzip" in text:
        return f"{path}: corrupt gzip stream: {text.splitlines()[0]}"
    return f"{path}: cannot load table {table.name!r}: {text.splitlines()[0]}"


def load_table(con: duckdb.DuckDBPyConnection, table: Table, path: Path) -> int:
    """Create `table` and fill it from `path`, typed by the schema; return its row count."""
    header = read_header(path)
    check_header(table, header, path)
    con.execute(table.create_sql())
    types = {name: table.column(name).duckdb_type for name in header}
    try:
        con.execute(
            f"INSERT INTO {table.name} ({', '.join(header)}) SELECT * FROM read_csv($path, header = true, "
            "auto_detect = false, delim = ',', quote = '\"', escape = '\"', allow_quoted_nulls = false, "
            "columns = $types)",
            {"path": str(path), "types": types},
        )
    except duckdb.Error as exc:
        raise LoadError(_describe_duckdb_error(path, table, exc)) from exc
    return scalar(con, f"SELECT count(*) FROM {table.name}")


def load_mimic(
    mimic_dir: Path,
    db_path: Path,
    substitutes: Mapping[str, Path] | None = None,
    allow_missing: bool = False,
    overwrite: bool = False,
    on_table: TableCallback | None = None,
) -> LoadReport:
    """Load every MIMIC-IV table of `mimic_dir` into a new DuckDB file at `db_path`, atomically.

    Absent tables are refused unless `allow_missing`, in which case they are created empty.
    """
    started = time.perf_counter()
    mimic_dir, substitutes = Path(mimic_dir), {k: Path(v) for k, v in (substitutes or {}).items()}
    if not mimic_dir.is_dir():
        raise LoadError(f"{mimic_dir}: not a directory; expected a MIMIC-IV folder with hosp/ and icu/")
    files, missing = locate_files(mimic_dir, substitutes)
    if missing and not allow_missing:
        raise LoadError(
            f"{mimic_dir}: table file(s) missing: {', '.join(missing)} "
            "(expected module/<table>.csv.gz or .csv); pass --allow-missing to load without them, "
            "or --table NAME=FILE to give a substitute"
        )
    report = LoadReport(db_path=Path(db_path), missing=missing, files=files)
    report.checksums_verified = verify_checksums(mimic_dir, files, substitutes)
    schema = load_schema()
    with atomic_output(Path(db_path), overwrite=overwrite) as tmp_path:
        con = duckdb.connect(str(tmp_path))
        try:
            for name, table in schema.items():
                if name in files:
                    report.rows[name] = load_table(con, table, files[name])
                else:
                    con.execute(table.create_sql())
                    report.rows[name] = 0
                if on_table:
                    on_table(name, report.rows[name], files[name].stat().st_size if name in files else 0)
            con.execute("CHECKPOINT")
        finally:
            con.close()
    report.seconds = time.perf_counter() - started
    return report


def total_bytes(mimic_dir: Path, substitutes: Mapping[str, Path] | None = None) -> int:
    """Bytes of the table files that a load would read (for a progress bar)."""
    files, _ = locate_files(Path(mimic_dir), {k: Path(v) for k, v in (substitutes or {}).items()})
    return sum(os.path.getsize(p) for p in files.values())
