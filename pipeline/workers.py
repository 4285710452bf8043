"""Worker processes: spawn-started, sharing the machine's cores without oversubscribing them, and they die with
their parent (a killed build or evaluation, by Airflow's SIGKILL or the OOM killer, leaves no orphan workers running
on, holding gigabytes of frames)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import SpawnContext, SpawnProcess

PR_SET_PDEATHSIG = 1
THREAD_SETTINGS = ("POLARS_MAX_THREADS", "EHRGYM_DUCKDB_THREADS")  # read as a worker imports polars, opens DuckDB


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (elsewhere: nothing to do, nothing done)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def usable_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


WORKER_MEMORY = "2GB"  # a worker's DuckDB memory limit (EHRGYM_DUCKDB_MEMORY), unless the user set one


def worker_environment(workers: int) -> dict[str, str]:
    """What each worker starts with: its share of the cores for polars' and DuckDB's thread pools (a lone worker's
    pools are not capped) and DuckDB's memory limit. N workers each running a pool as wide as the machine ran 2 workers
    slower than 1 (424 s vs 360 s at 10K patients); capped to a core each, 257 s. DuckDB's own default limit is 80%
    of the machine per connection, and its buffer pool keeps what it read up to the limit: a worker's peak is that
    limit plus about 0.4 GB (100,000 patients: 2.35 GB at 2 GB, 3.3 GB at 3 GB). A setting already in the
    environment is the user's and is kept."""
    memory = {"EHRGYM_DUCKDB_MEMORY": os.environ.get("EHRGYM_DUCKDB_MEMORY", WORKER_MEMORY)}
    if workers <= 1:
        return memory
    share = str(max(1, usable_cores() // workers))
    return {**memory, **{name: os.environ.get(name, share) for name in THREAD_SETTINGS}}


class _SpawnWithEnvironment(SpawnContext):
    """The spawn context, whose processes start with `environment` added to the parent's (polars sizes its thread
    pool when it is imported, which a spawned worker does while it unpickles its initializer: too early to set)."""

    def __init__(self, environment: dict[str, str]):
        super().__init__()
        self.environment = environment

    # multiprocessing's own name, called as `context.Process(...)`: a method here, a class attribute there
    def Process(self, *args, **kwargs) -> SpawnProcess:  # type: ignore[override]  # noqa: N802
        return _ProcessWithEnvironment(self.environment, *args, **kwargs)


class _ProcessWithEnvironment(SpawnProcess):
    def __init__(self, environment: dict[str, str], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.environment = environment

    def start(self) -> None:
        with _environment(self.environment):
            super().start()


_ENVIRONMENT_LOCK = threading.Lock()  # the environment is the process's: two pools starting at once take turns


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    with _ENVIRONMENT_LOCK:
        saved = {name: os.environ.get(name) for name in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def spawn_pool(workers: int, initializer: Callable[..., None], initargs: tuple) -> ProcessPoolExecutor:
    """A pool of `workers` spawn-started processes (no fork of a process holding DuckDB threads), each with its
    share of the cores and its memory limit (`worker_environment`), which dies with its parent and then runs
    `initializer(*initargs)`."""
    return ProcessPoolExecutor(
        workers,
        mp_context=_SpawnWithEnvironment(worker_environment(workers)),
        initializer=_start,
        initargs=(initializer, initargs),
    )


def _start(initializer: Callable[..., None], initargs: tuple) -> None:
    die_with_parent()
    initializer(*initargs)
