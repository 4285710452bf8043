"""The sandboxed child of the Python tool: runs agent code whose only way to the data is `sql()` over a pipe.

The parent passes pipeline/env/landlock.py's text followed by this file's text with `python -I -c`; it never
imports project code. Before agent code runs, the child confines itself with Landlock (read-only Python and system
libraries, read-write scratch, no execute, no TCP), drops its references to denied modules and installs an audit
hook as a second layer. In its own mount namespace (when the parent asks) scratch is first a size- and inode-limited
tmpfs mounted noexec: no loader (import, ctypes, polars plugins) can map native code from it, and the kernel holds
the disk quota; the audit hook also refuses any extension module from outside the interpreter's read-only roots.
Protocol (JSON lines): parent -> child `{"code"}` then `{"ok", "columns", "types", "rows", "truncated", "error"}` per
query; child -> parent `{"sql"}` per query and finally `{"done", "ok", "output", "cut"}`.
"""

import ctypes
import io
import json
import os
import sys
import types

TYPE_CHECKING = False  # true for type checkers only (the child does not import `typing` for it)
if TYPE_CHECKING:
    from pipeline.env.landlock import LANDLOCK_MISSING, confine  # the parent prepends landlock.py's text instead

SCRATCH = os.path.realpath(os.getcwd())
OUTPUT_CAP = int(os.environ.get("EHRGYM_OUTPUT_CAP", "20000"))
_PYTHON_ROOTS = sorted(
    {
        os.path.realpath(p)
        for p in {sys.prefix, sys.base_prefix, sys.exec_prefix} | {p for p in sys.path if p and "site-packages" in p}
    }
)
_LIBRARY_ROOTS = ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache", "/usr/share/zoneinfo"]
_READ_ROOTS = tuple(p + os.sep for p in _PYTHON_ROOTS)
_DENIED_EVENTS = (
    "socket.",
    "subprocess.",
    "os.exec",
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "os.kill",
    "os.killpg",
    "ctypes.",
    "pty.",
    "mmap.",
    "os.setuid",
    "os.chroot",
    "sys.setprofile",
    "sys.settrace",
    "os.add_dll_directory",
    "shutil.",
    "webbrowser.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "os.putenv",
    "os.unsetenv",
    "os.startfile",
    "resource.",
    "winreg.",
    "sqlite3.",
    "code.",
    "cpython.run_",
    "os.listxattr",
    "signal.",
    "os.chdir",
    "os.setxattr",
    "os.removexattr",
    "os.getxattr",
    "sys.remote_exec",
)
_DENIED_IMPORTS = {
    "ctypes",
    "_ctypes",
    "socket",
    "_socket",
    "_posixsubprocess",
    "subprocess",
    "multiprocessing",
    "mmap",
    "pty",
    "fcntl",
    "resource",
    "_ssl",
    "ssl",
    "ftplib",
    "urllib.request",
    "http.client",
    "asyncio",
    "duckdb",
    "pipeline",
    "signal",
    "_signal",
    "faulthandler",
    "gc",
}
_DENIED_ROOTS = {m.split(".")[0] for m in _DENIED_IMPORTS}
_EMPTIED = {"subprocess", "_posixsubprocess", "socket", "_socket", "ctypes", "_ctypes"}  # their functions die too
# event -> (positions of path arguments, positions of dir_fd arguments: -1 or None is "no dir_fd")
_PATH_EVENTS = {
    "open": ((0,), ()),
    "os.listdir": ((0,), ()),
    "os.scandir": ((0,), ()),
    "os.mkdir": ((0,), (2,)),
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.link": ((0, 1), (2, 3)),
    "os.symlink": ((0, 1), (2,)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.lchown": ((0,), ()),
    "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)),
    "os.walk": ((0,), ()),
    "glob.glob": ((0,), ()),
    "glob.glob/2": ((0,), (3,)),
    "os.chflags": ((0,), ()),
    "os.lchmod": ((0,), ()),
    "os.readlink": ((0,), ()),
    "shutil.rmtree": ((0,), ()),
}


def _inside_scratch(path) -> bool:
    real = os.path.realpath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
    return real == SCRATCH or real.startswith(SCRATCH + os.sep)


def _readable(path, mode) -> bool:
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False  # an int is an already open descriptor: refuse, agent code has no business with raw fds
    real = os.path.realpath(os.fsdecode(path))
    read_only = mode is None or (isinstance(mode, str) and not set(mode) & set("wax+"))
    return read_only and real.endswith((".py", ".pyc", ".so")) and real.startswith(_READ_ROOTS)


MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8


def _mount_scratch() -> str | None:
    """Mount the limited noexec tmpfs over scratch when the parent asks (EHRGYM_SCRATCH_TMPFS="bytes:inodes:the
    parent's mount namespace"), only inside a mount namespace of its own; the refusal text when it cannot."""
    quota = os.environ.get("EHRGYM_SCRATCH_TMPFS", "")
    if not quota:
        return None
    size, inodes, parent_namespace = quota.split(":", 2)
    if os.readlink("/proc/self/ns/mnt") == parent_namespace:
        return "the Python sandbox found no mount namespace of its own for its scratch folder"
    options = f"size={size},nr_inodes={inodes},mode=0700".encode()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", SCRATCH.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) != 0:
        return f"the Python sandbox could not mount its scratch folder ({os.strerror(ctypes.get_errno())})"
    os.chdir(SCRATCH)  # the cwd still named the folder under the mount
    return None


def _confine() -> str | None:
    """Landlock (from landlock.py, prepended by the parent), for this process for good; the refusal text if the
    kernel cannot do it. It binds only the calling thread and the threads it starts later, hence before polars."""
    try:
        confine(_PYTHON_ROOTS + _LIBRARY_ROOTS, [SCRATCH])
    except OSError as err:
        return f"{LANDLOCK_MISSING} ({err})"
    return None


_UNCONFINED = _mount_scratch() or _confine()

import polars as pl  # noqa: E402  (after Landlock: polars' I/O threads must inherit the ruleset)


def _denied(value) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in _DENIED_ROOTS


def _purge_denied_modules() -> None:
    """Drop denied modules from sys.modules and from every loaded module's namespace (polars keeps `subprocess`
    and `ctypes`), and empty the namespaces of the process- and socket-making ones, so no reference reaches them."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key in [k for k, v in namespace.items() if _denied(v)]:
            del namespace[key]
    for name in [n for n in sys.modules if n.split(".")[0] in _DENIED_ROOTS]:
        module = sys.modules.pop(name)
        if name in _EMPTIED:
            module.__dict__.clear()


def _path_allowed(event: str, args: tuple) -> bool:
    paths, dir_fds = _PATH_EVENTS[event]
    if any(i < len(args) and args[i] not in (None, -1) for i in dir_fds):
        return False  # a path relative to a descriptor escapes every check made on the path text
    mode = args[1] if event == "open" and len(args) > 1 else "w"
    flags = args[2] if event == "open" and len(args) > 2 else 0
    if isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND):
        mode = "w"
    listing = event in ("os.listdir", "os.scandir")
    chosen = [("." if listing and args[i] is None else args[i]) for i in paths if i < len(args)]
    return all(_inside_scratch(p) or (event == "open" and _readable(p, mode)) for p in chosen)


def _native_allowed(path) -> bool:
    """An extension module's file (the `import` event's second argument) loads only from the interpreter's roots."""
    return isinstance(path, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(path)).startswith(_READ_ROOTS)


def _hook(event: str, args: tuple) -> None:
    if event.startswith(_DENIED_EVENTS):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import" and args and str(args[0]).split(".")[0] in _DENIED_ROOTS:
        raise PermissionError(f"sandbox: import of {args[0]} is not allowed")
    if event == "import" and len(args) > 1 and args[1] is not None and not _native_allowed(args[1]):
        raise PermissionError(f"sandbox: no native code from {args[1]!r}: only the interpreter's own modules load")
    if event in _PATH_EVENTS and args and not _path_allowed(event, args):
        raise PermissionError(f"sandbox: no access to {args[0]!r} outside the scratch folder")


class SqlError(Exception):
    """The gateway refused or failed the query (the message is the gateway's)."""


class _CappedBuffer(io.StringIO):
    cut = False

    def write(self, text: str) -> int:
        room = OUTPUT_CAP - self.tell()
        if room > 0:
            super().write(text[:room])
        self.cut = self.cut or len(text) > room
        return len(text)


_CASTS: dict[str, pl.DataType | type[pl.DataType]] = {"TIMESTAMP": pl.Datetime("us"), "DATE": pl.Date}


def _frame(reply: dict) -> pl.DataFrame:
    columns, rows = reply["columns"], reply["rows"]
    data = {f"{c}" if c not in columns[:i] else f"{c}_{i}": [r[i] for r in rows] for i, c in enumerate(columns)}
    frame = pl.DataFrame(data, strict=False)
    for name, kind in zip(frame.columns, reply.get("types", [])):
        if kind in _CASTS and frame[name].dtype == pl.String:
            frame = frame.with_columns(pl.col(name).str.to_datetime(strict=False).cast(_CASTS[kind]))
    return frame


def _make_sql(send, receive):
    def sql(query: str) -> pl.DataFrame:
        """Run a read-only query through the environment's SQL gateway; returns a polars DataFrame."""
        send({"sql": str(query)})
        reply = receive()
        if not reply.get("ok"):
            raise SqlError(reply.get("error") or "query failed")
        if reply.get("truncated"):
            print(f"[sql: only the first {len(reply['rows'])} rows were returned]")
        return _frame(reply)

    return sql


def _no_new_processes() -> None:
    """RLIMIT_NPROC 0 after polars has started its thread pool: no fork and no thread for agent code (root is
    exempt from this limit; there the audit hook and the pid namespace hold)."""
    import resource

    pl.DataFrame({"a": [1, 2]}).select(pl.col("a").sum())
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def main() -> None:
    channel_in, channel_out = sys.stdin, sys.stdout
    send = lambda message: (channel_out.write(json.dumps(message) + "\n"), channel_out.flush())  # noqa: E731
    receive = lambda: json.loads(channel_in.readline() or "{}")  # noqa: E731
    code = receive().get("code", "")
    buffer = _CappedBuffer()
    sys.stdout = sys.stderr = buffer
    namespace = {"__name__": "__main__", "sql": _make_sql(send, receive), "pl": pl, "SqlError": SqlError}
    if _UNCONFINED:  # never run agent code unconfined
        send({"done": True, "ok": False, "output": _UNCONFINED, "cut": False})
        return
    _no_new_processes()
    if os.environ.get("EHRGYM_AUDIT_HOOK") != "0":  # "0" only from tests of Landlock alone (set by the parent)
        _purge_denied_modules()
        sys.addaudithook(_hook)
    ok = True
    try:
        exec(compile(code, "<agent>", "exec"), namespace)
    except BaseException as err:  # the agent's own error is output, never a crash of the tool
        ok = False
        print(f"{type(err).__name__}: {err}", file=buffer)
    send({"done": True, "ok": ok, "output": buffer.getvalue(), "cut": buffer.cut})


main()
