"""Agent SQL out of process: episodes' queries run in a child process, so a crash or a runaway function costs a
restart of the child, never the host (the server, the evaluation) or another episode's state.

The child holds its own locked, read-only connection to the source and one cursor with its overlay per open
episode, under an address-space ceiling (RLIMIT_AS) that bounds what any engine function can allocate. The host
admits queries (pipeline.env.sqlcheck) and sends only admitted text. A child that dies (a segfault in an engine
function) or outlives a query's time limit by `grace` seconds (a function the watchdog cannot interrupt) is killed
and started again, with every open episode's overlay applied again; the query that did it gets an error and the
episode goes on.
"""

from __future__ import annotations

import itertools
import os
import resource
import socket
import subprocess
import sys
import threading
from contextlib import ExitStack
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pipeline.env.gateway import Limits, QueryOutcome, execute_admitted, open_locked
from pipeline.noise.overlay import overlay
from pipeline.noise.patch import Patch

CRASHED = "the query crashed the query engine; it was restarted and the episode goes on (this query cannot be run)"
RUNAWAY = "query exceeded the time limit of {seconds:g} s and could not be interrupted; the query engine was restarted"
GRACE_SECONDS = 2.0
ADDRESS_SPACE_GB = 8.0  # the child's address-space ceiling: DuckDB's memory_limit (2 GB) plus strings and threads


def serve(conn: Connection) -> None:
    """The child: read its configuration, open the source, then answer requests until told to stop or the pipe
    closes."""
    db_path, limits, shadow, address_space = conn.recv()
    if address_space:  # a hard memory bound no engine function escapes: an allocation past it fails in the child
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    con = open_locked(Path(db_path), limits)
    episodes: dict[int, tuple[Any, ExitStack]] = {}
    conn.send(("ready",))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        kind, episode_id, *args = request
        if kind == "open":
            cursor, stack = con.cursor(), ExitStack()
            stack.callback(cursor.close)
            stack.enter_context(overlay(cursor, Patch.model_validate_json(args[0]) if args[0] else None, shadow))
            episodes[episode_id] = (cursor, stack)
            conn.send(("ok",))
        elif kind == "run":
            conn.send(execute_admitted(episodes[episode_id][0], args[0], args[1], limits))
        elif kind == "close":
            episodes.pop(episode_id)[1].close()
            conn.send(("ok",))
        elif kind == "stop":
            return


class Executor:
    """One child process serving the SQL of many episodes, one request at a time; restarted on death."""

    def __init__(
        self,
        db_path: Path,
        limits: Limits,
        shadow: tuple[str, ...],
        grace: float = GRACE_SECONDS,
        address_space_gb: float = ADDRESS_SPACE_GB,
    ):
        self.db_path, self.limits, self.shadow, self.grace = Path(db_path), limits, tuple(shadow), grace
        self.address_space = int(address_space_gb * (1 << 30))  # the child's RLIMIT_AS (0: none)
        self._lock, self._ids = threading.Lock(), itertools.count(1)
        self._open: dict[int, str | None] = {}  # episode id -> its patch (JSON), to re-apply after a restart
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        with self._lock:
            self._start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def _channel(self) -> Connection:
        """The pipe to the child (set from `_start` to `_stop`)."""
        if self._conn is None:
            raise RuntimeError("the executor's child process is not running")
        return self._conn

    @property
    def open_episodes(self) -> list[int]:
        """Ids of the episodes whose overlays the child holds (and applies again after a restart)."""
        return sorted(self._open)

    def open(self, patch: Patch | None) -> int:
        """Apply an episode's overlay in the child; the id names the episode in later calls."""
        episode_id, patch_json = next(self._ids), patch.model_dump_json() if patch is not None else None
        with self._lock:
            self._open[episode_id] = patch_json
            self._request(("open", episode_id, patch_json))
        return episode_id

    def run(self, episode_id: int, text: str, seconds: float) -> QueryOutcome:
        """An admitted query's outcome; a crash or a runaway query is an error outcome, never an exception."""
        with self._lock:
            try:
                channel = self._channel
                channel.send(("run", episode_id, text, seconds))
                if channel.poll(seconds + self.grace):
                    return channel.recv()
                error = RUNAWAY.format(seconds=self.limits.seconds)
            except (EOFError, OSError):
                error = CRASHED
            self._restart()
            return QueryOutcome(False, [], [], error=error)

    def close(self, episode_id: int) -> None:
        with self._lock:
            if self._open.pop(episode_id, "gone") != "gone" and self._alive():
                self._request(("close", episode_id))

    def shutdown(self) -> None:
        with self._lock:
            self._stop()

    def _request(self, request: tuple) -> None:
        """Send a request and wait for its acknowledgement (restarting once if the child is gone)."""
        for attempt in (1, 2):
            try:
                channel = self._channel
                channel.send(request)
                channel.recv()
                return
            except (EOFError, OSError):
                if attempt == 2:
                    raise
                self._restart()

    def _start(self) -> None:
        """A fresh interpreter (never a fork of a process that runs DuckDB threads; no re-import of the caller's
        main module, as multiprocessing's spawn would do), talking over a socket pair."""
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "pipeline.env.executor", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env={**os.environ, "PYTHONPATH": _root_path()},
        )
        theirs.close()
        self._conn = channel = Connection(ours.detach())
        channel.send((str(self.db_path), self.limits, self.shadow, self.address_space))
        channel.recv()  # ready
        for episode_id, patch_json in self._open.items():
            channel.send(("open", episode_id, patch_json))
            channel.recv()

    def _restart(self) -> None:
        self.restarts += 1
        self._stop()
        self._start()

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _stop(self) -> None:
        if self._process is None:
            return
        if self._alive():
            try:
                self._channel.send(("stop", 0))
                self._process.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self._alive():
            self._process.kill()
        self._process.wait()
        self._channel.close()
        self._process, self._conn = None, None


def _root_path() -> str:
    """PYTHONPATH for the child: the folder holding the `pipeline` package, then the caller's own."""
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])))
