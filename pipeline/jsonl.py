"""The one JSONL codec: pydantic records to lines and back; a bad line's error names its file and line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def dumps(records: Iterable[BaseModel]) -> str:
    """One compact JSON object per line, in the records' order."""
    return "".join(record.model_dump_json() + "\n" for record in records)


def write(path: Path, records: Iterable[BaseModel]) -> None:
    """`records` into `path` (its folder made as needed); callers write inside a folder they publish whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(records))


def read(path: Path, model: type[M], error: type[Exception] = ValueError, missing: str = "") -> list[M]:
    """Every non-blank line of `path` as a `model`; `error` names the file (and `missing` what was expected there)
    when it is absent, and the file and line when a line is not a `model`."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: missing{f' ({missing})' if missing else ''}")
    out: list[M] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(model.model_validate_json(line))
        except ValueError as err:
            raise error(f"{path}:{number}: not a {model.__name__}: {str(err).splitlines()[0]}") from None
    return out
