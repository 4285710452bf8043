"""Worker processes: spawn-started, and they die with their parent (a killed build or evaluation, by Airflow's
SIGKILL or the OOM killer, leaves no orphan workers running on, holding gigabytes of frames)."""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (elsewhere: nothing to do, nothing done)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn_pool(workers: int, initializer: Callable[..., None], initargs: tuple) -> ProcessPoolExecutor:
    """A pool of `workers` spawn-started processes (no fork of a process holding DuckDB threads), each of which
    dies with its parent and then runs `initializer(*initargs)`."""
    return ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start,
        initargs=(initializer, initargs),
    )


def _start(initializer: Callable[..., None], initargs: tuple) -> None:
    die_with_parent()
    initializer(*initargs)
