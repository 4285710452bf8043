"""The Python tool: agent code runs in a limited child process that reaches the data only through the gateway.

The child gets a cleared environment, a fresh scratch folder as cwd, CPU-time, address-space, file-size and process
limits, a wall-clock kill, a new user + network + pid + mount namespace when `unshare` works here (scratch is then a
size-limited noexec tmpfs), a Landlock ruleset (read-only Python, read-write scratch, no execute, no TCP; without
Landlock the tool refuses to run) and an audit hook refusing sockets, subprocesses, ctypes, native code from outside
the interpreter and file access outside scratch as a second layer. A subreaper supervisor (sandbox_supervisor.py)
kills the call's whole process tree when it ends; a watchdog holds the scratch quota where no tmpfs could be
mounted; scratch is removed by pipeline/env/scratch.py (no recursion, no long paths, no symlink followed).
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pipeline.env.gateway import QueryOutcome
from pipeline.env.landlock import LANDLOCK_MISSING, landlock_abi
from pipeline.env.scratch import remove_tree, usage

CHILD_SOURCE = Path(__file__).with_name("sandbox_child.py")
LANDLOCK_SOURCE = Path(__file__).with_name("landlock.py")
SUPERVISOR_SOURCE = Path(__file__).with_name("sandbox_supervisor.py")
MAX_MESSAGE = 8 << 20  # bytes of one channel message
WATCH_SECONDS = 0.2  # how often the parent measures scratch when no tmpfs holds its quota
CLEANUP_SECONDS = 8.0  # the supervisor's time to kill its tree before the parent SIGKILLs its group
UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one Python tool call."""

    cpu_seconds: int = 10
    wall_seconds: float = 20.0
    memory_bytes: int = 2 << 30
    file_bytes: int = 16 << 20
    output_chars: int = 20_000
    scratch_bytes: int = 64 << 20
    scratch_entries: int = 4_096


@cache
def landlock_available() -> bool:
    """Whether this kernel offers Landlock; without it the Python tool refuses to run agent code."""
    return landlock_abi() > 0


@cache
def namespaces_available() -> bool:
    """Whether unprivileged `unshare` (user, net, pid namespaces) works on this machine."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run([*UNSHARE, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@cache
def scratch_mount_available() -> bool:
    """Whether the child can mount a tmpfs over its scratch folder inside its own namespaces here."""
    probe = "import ctypes, sys; sys.exit(ctypes.CDLL(None).mount(b'tmpfs', b'/tmp', b'tmpfs', 14, b'size=1m'))"
    if not namespaces_available():
        return False
    try:
        run = subprocess.run([*UNSHARE, sys.executable, "-I", "-S", "-c", probe], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return run.returncode == 0


def _rlimits(limits: SandboxLimits) -> dict[str, tuple[int, int]]:
    return {
        "cpu": (limits.cpu_seconds, limits.cpu_seconds + 1),
        "as": (limits.memory_bytes, limits.memory_bytes),
        "fsize": (limits.file_bytes, limits.file_bytes),
        "nofile": (64, 64),
        "core": (0, 0),
    }


def _preexec(limits: SandboxLimits) -> Callable[[], None] | None:
    """Limits set between fork and exec, only where `prlimit` is missing (preexec_fn is fragile with threads)."""
    if shutil.which("prlimit"):
        return None
    names = {
        "cpu": resource.RLIMIT_CPU,
        "as": resource.RLIMIT_AS,
        "fsize": resource.RLIMIT_FSIZE,
        "nofile": resource.RLIMIT_NOFILE,
        "core": resource.RLIMIT_CORE,
    }

    def apply() -> None:
        for k, v in _rlimits(limits).items():
            resource.setrlimit(names[k], v)

    return apply


def _command(limits: SandboxLimits | None = None) -> list[str]:
    """supervisor -> prlimit (when present) -> unshare (when it works) -> `python -I -c <child source>`; every
    program by absolute path (the supervisor starts the next one without a PATH)."""
    child = [sys.executable, "-I", "-c", LANDLOCK_SOURCE.read_text() + "\n" + CHILD_SOURCE.read_text()]
    wrapped = [shutil.which("unshare"), *UNSHARE[1:], *child] if namespaces_available() else child
    if shutil.which("prlimit") is not None:
        options = [f"--{name}={soft}:{hard}" for name, (soft, hard) in _rlimits(limits or SandboxLimits()).items()]
        wrapped = [shutil.which("prlimit"), *options, "--", *wrapped]
    return [sys.executable, "-I", "-S", "-c", SUPERVISOR_SOURCE.read_text(), *wrapped]


def _environment(limits: SandboxLimits, audit_hook: bool) -> dict[str, str]:
    mount = namespaces_available() and scratch_mount_available()
    tmpfs = f"{limits.scratch_bytes}:{limits.scratch_entries + 1}:{os.readlink('/proc/self/ns/mnt')}" if mount else ""
    return {
        "POLARS_MAX_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "EHRGYM_OUTPUT_CAP": str(limits.output_chars),
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
        "EHRGYM_AUDIT_HOOK": "1" if audit_hook else "0",
        "EHRGYM_SCRATCH_TMPFS": tmpfs,
    }


def _reply(outcome: QueryOutcome) -> dict:
    return {
        "ok": outcome.ok,
        "columns": outcome.columns,
        "types": outcome.types,
        "rows": outcome.rows,
        "truncated": outcome.truncated,
        "error": outcome.error,
    }


class _Session:
    """One child process and its JSON-line channel; every read and write respects the wall-clock deadline."""

    def __init__(self, process: subprocess.Popen[bytes], deadline: float, watch: Callable[[], str | None]):
        if process.stdin is None or process.stdout is None:
            raise ValueError("the sandbox process needs piped stdin and stdout")
        self.process, self.deadline, self.buffer, self.watch = process, deadline, b"", watch
        self.stopped: str | None = None
        self.stdin = process.stdin
        self.watched = time.monotonic()
        self.fd = process.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)

    def send(self, message: dict) -> None:
        """Write in a helper thread: a child that stops reading must not block the parent past the deadline."""
        writer = threading.Thread(target=self._write, args=(json.dumps(message).encode() + b"\n",), daemon=True)
        writer.start()
        writer.join(max(0.0, self.deadline - time.monotonic()))
        if writer.is_alive():
            raise TimeoutError("the sandbox stopped reading its channel")

    def _write(self, data: bytes) -> None:
        try:
            self.stdin.write(data)
            self.stdin.flush()
        except (OSError, ValueError):
            pass  # the child is gone; the reader sees it

    def _line(self) -> bytes | None:
        while b"\n" not in self.buffer:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0 or len(self.buffer) > MAX_MESSAGE:
                return None
            ready = self.selector.select(min(remaining, WATCH_SECONDS))
            if time.monotonic() - self.watched >= WATCH_SECONDS:
                self.stopped, self.watched = self.watch(), time.monotonic()
                if self.stopped:
                    return None
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def receive(self) -> dict | None:
        """The next message, or None on timeout, exit or garbage (the child is then killed by the caller)."""
        line = self._line()
        try:
            message = json.loads(line) if line else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return message if isinstance(message, dict) else None


def _ending(message: dict, cap: int) -> tuple[bool, str] | None:
    """The end message as (ok, output cut to `cap`); None when its output is longer than the child could have sent
    (agent code forged it), which fails the call like a broken channel."""
    output = message.get("output", "")
    if not isinstance(output, str) or len(output) > cap:
        return None
    return bool(message.get("ok")), output + (f"\n[output cut at {cap} characters]" if message.get("cut") else "")


def _converse(session: _Session, code: str, query: Callable[[str], QueryOutcome], cap: int):
    session.send({"code": code})
    while True:
        message = session.receive()
        if message is None:
            return None
        if message.get("done"):
            return _ending(message, cap)
        session.send(_reply(query(str(message.get("sql", "")))))


def _kill(process: subprocess.Popen[bytes]) -> None:
    """The supervisor kills the call's whole tree on SIGTERM; its process group is SIGKILLed if it does not end."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(CLEANUP_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _quota(scratch: str, limits: SandboxLimits) -> Callable[[], str | None]:
    """The watchdog: the reason to stop once scratch passes its quota (a tmpfs, when mounted, is never seen here:
    the parent then sees the empty folder under the child's mount)."""

    def over() -> str | None:
        size, entries = usage(scratch, limits.scratch_entries)
        if size > limits.scratch_bytes or entries > limits.scratch_entries:
            return (
                f"the code was stopped: its scratch folder passed the disk quota ({limits.scratch_bytes >> 20} "
                f"MB, {limits.scratch_entries} files and folders)"
            )
        return None

    return over


def _failure(limits: SandboxLimits, started: float, stopped: str | None = None) -> str:
    if stopped:
        return stopped
    if time.monotonic() - started >= limits.wall_seconds:
        return f"the code was stopped at the wall-clock limit of {limits.wall_seconds:g} s"
    return (
        f"the code was stopped: it exceeded a sandbox limit (CPU {limits.cpu_seconds} s, memory "
        f"{limits.memory_bytes >> 20} MB, file size {limits.file_bytes >> 20} MB) or broke the tool's channel"
    )


def run_code(code: str, query: Callable[[str], QueryOutcome], limits=None, *, audit_hook: bool = True):
    """Run agent code; `query` serves its sql() calls. Returns (ok, printed output or the error).

    `audit_hook=False` (tests only; no tool passes it) leaves Landlock as the only layer, to check it alone."""
    limits = limits if isinstance(limits, SandboxLimits) else SandboxLimits()
    if not landlock_available():
        return False, LANDLOCK_MISSING
    scratch, started = tempfile.mkdtemp(prefix="ehrgym-py-"), time.monotonic()
    try:
        process = subprocess.Popen(
            _command(limits),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=scratch,
            env=_environment(limits, audit_hook),
            preexec_fn=_preexec(limits),
            start_new_session=True,
            close_fds=True,
        )
        session = _Session(process, started + limits.wall_seconds, _quota(scratch, limits))
        try:
            result = _converse(session, code, query, limits.output_chars)
        except (OSError, TimeoutError):
            result = None
        finally:
            _kill(process)
        return result if result is not None else (False, _failure(limits, started, session.stopped))
    finally:
        remove_tree(scratch)
