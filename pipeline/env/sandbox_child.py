"""The sandboxed child of the Python tool: runs agent code whose only way to the data is `sql()` over a pipe.

The parent passes this file's text with `python -I -c`; it never imports project code. Protocol (JSON lines):
parent -> child `{"code"}` then `{"ok", "columns", "types", "rows", "truncated", "error"}` per query;
child -> parent `{"sql"}` per query and finally `{"done", "ok", "output"}`.
"""

import io
import json
import os
import sys

import polars as pl

SCRATCH = os.path.realpath(os.getcwd())
OUTPUT_CAP = int(os.environ.get("EHRGYM_OUTPUT_CAP", "20000"))
_READ_ROOTS = tuple(os.path.realpath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}
                    | {p for p in sys.path if p and "site-packages" in p})
_DENIED_EVENTS = ("socket.", "subprocess.", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                  "os.system", "os.kill", "os.killpg", "ctypes.", "pty.", "mmap.", "os.setuid", "os.chroot",
                  "sys.setprofile", "sys.settrace", "os.add_dll_directory", "shutil.", "webbrowser.", "urllib.",
                  "http.", "ftplib.", "smtplib.", "os.putenv", "os.unsetenv", "os.startfile", "resource.",
                  "winreg.", "sqlite3.", "code.", "cpython.run_", "os.listxattr", "signal.")
_DENIED_IMPORTS = {"ctypes", "_ctypes", "socket", "_socket", "_posixsubprocess", "subprocess", "multiprocessing",
                   "mmap", "pty", "fcntl", "resource", "_ssl", "ssl", "ftplib", "urllib.request", "http.client",
                   "asyncio", "duckdb", "pipeline", "signal", "_signal", "faulthandler", "gc"}
_PATH_EVENTS = {"open", "os.listdir", "os.scandir", "os.chdir", "os.mkdir", "os.remove", "os.rename", "os.rmdir",
                "os.chmod", "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime", "os.walk", "glob.glob",
                "os.chflags", "os.lchown", "os.lchmod", "shutil.rmtree", "os.readlink"}


def _inside_scratch(path) -> bool:
    real = os.path.realpath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
    return real == SCRATCH or real.startswith(SCRATCH + os.sep)


def _readable(path, mode) -> bool:
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False  # an int is an already open descriptor: refuse, agent code has no business with raw fds
    real = os.path.realpath(os.fsdecode(path))
    read_only = mode is None or (isinstance(mode, str) and not set(mode) & set("wax+"))
    return read_only and real.endswith((".py", ".pyc", ".so")) and real.startswith(_READ_ROOTS)


def _forget_denied_modules() -> None:
    """Drop denied modules that polars imported, so that agent code importing them goes through the hook."""
    denied = {m.split(".")[0] for m in _DENIED_IMPORTS}
    for name in [n for n in sys.modules if n.split(".")[0] in denied]:
        del sys.modules[name]


def _hook(event: str, args: tuple) -> None:
    if event.startswith(_DENIED_EVENTS):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import" and args and str(args[0]).split(".")[0] in {m.split(".")[0] for m in _DENIED_IMPORTS}:
        raise PermissionError(f"sandbox: import of {args[0]} is not allowed")
    if event in _PATH_EVENTS and args:
        mode = args[1] if event == "open" and len(args) > 1 else "w"
        flags = args[2] if event == "open" and len(args) > 2 else 0
        if isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND):
            mode = "w"
        if not _inside_scratch(args[0]) and not (event == "open" and _readable(args[0], mode)):
            raise PermissionError(f"sandbox: no access to {args[0]!r} outside the scratch folder")


class SqlError(Exception):
    """The gateway refused or failed the query (the message is the gateway's)."""


class _CappedBuffer(io.StringIO):
    def write(self, text: str) -> int:
        room = OUTPUT_CAP - self.tell()
        if room > 0:
            super().write(text[:room])
        return len(text)


_CASTS = {"TIMESTAMP": pl.Datetime("us"), "DATE": pl.Date}


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
    _no_new_processes()
    _forget_denied_modules()
    sys.addaudithook(_hook)
    ok = True
    try:
        exec(compile(code, "<agent>", "exec"), namespace)
    except BaseException as err:  # the agent's own error is output, never a crash of the tool
        ok = False
        print(f"{type(err).__name__}: {err}", file=buffer)
    text = buffer.getvalue()
    if len(text) >= OUTPUT_CAP:
        text += f"\n[output cut at {OUTPUT_CAP} characters]"
    send({"done": True, "ok": ok, "output": text})


main()
