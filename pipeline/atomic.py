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
        _move_into_place(tmp, final, overwrite)
        _remove(final.with_name(final.name + ".wal"))  # a replaced database's old log must not replay onto the new one
    finally:
        for path in leftovers:
            _remove(path)


def _move_into_place(tmp: Path, final: Path, overwrite: bool) -> None:
    """Rename `tmp` onto `final`; without `overwrite`, fail rather than replace anything that appeared meanwhile."""
    if overwrite:
        os.replace(tmp, final)
    elif tmp.is_dir():
        if final.exists():
            raise FileExistsError(f"{final} appeared while it was being built; refusing to overwrite it")
        os.rename(tmp, final)  # Linux refuses to rename a directory onto a non-empty one
    else:
        os.link(tmp, final)  # fails if final exists: no window in which it could be replaced
        tmp.unlink()
