"""Write-then-rename: an output appears whole at its final path or not at all."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def atomic_output(final: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling path to write; rename it onto `final` only if the block succeeds.

    Refuses (FileExistsError) when `final` exists and `overwrite` is false. On any failure the
    temporary path (and a DuckDB `.wal` beside it) is removed, so nothing half-written remains.
    """
    final = Path(final)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists; refusing to overwrite it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    leftovers = (tmp, tmp.with_name(tmp.name + ".wal"))
    for path in leftovers:
        _remove(path)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        for path in leftovers:
            _remove(path)
