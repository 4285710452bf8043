"""The Python tool's sandbox: output capture, sql() through a callback, limits, a cleared environment, no files,
Landlock as the confinement (checked alone, without the audit hook) and the refusal to run without it."""

from __future__ import annotations

import os

import pytest

from pipeline.env.gateway import QueryOutcome
from pipeline.env import sandbox
from pipeline.env.sandbox import SandboxLimits, _command, _ending, landlock_available, namespaces_available, run_code

FAST = SandboxLimits(cpu_seconds=2, wall_seconds=5.0, memory_bytes=1 << 30, output_chars=2_000)
needs_landlock = pytest.mark.skipif(not landlock_available(), reason="this kernel offers no Landlock, so the Python "
                                    "tool refuses to run code (test_without_landlock_the_tool_refuses still runs)")
LANDLOCK_PROBE = """
import os, subprocess, socket, sys
def attempt(name, action):
    try:
        action()
        print(name, 'allowed')
    except OSError as err:
        print(name, 'denied', err.errno or (13 if '(os error 13)' in str(err) else str(err)))  # polars: no errno
"""


def _gateway(seen: list[str]):
    def query(sql: str) -> QueryOutcome:
        seen.append(sql)
        if "fail" in sql:
            return QueryOutcome(False, [], [], error="unknown table 'fail'")
        return QueryOutcome(True, ["n", "t"], [[1, "2150-01-02 03:04:05"], [2, None]], types=["BIGINT", "TIMESTAMP"])

    return query


@needs_landlock
def test_sql_returns_a_typed_polars_frame_through_the_callback():
    seen: list[str] = []
    ok, output = run_code("df = sql('SELECT n, t FROM x')\nprint(df.dtypes, df['n'].sum())", _gateway(seen), FAST)
    assert ok and "Int64" in output and "Datetime" in output and output.strip().endswith("3")
    assert seen == ["SELECT n, t FROM x"]


@needs_landlock
def test_a_refused_query_raises_sql_error_inside_the_code():
    ok, output = run_code("try:\n    sql('fail')\nexcept SqlError as e:\n    print('caught', e)", _gateway([]), FAST)
    assert ok and output.strip() == "caught unknown table 'fail'"
    ok, output = run_code("sql('fail')", _gateway([]), FAST)
    assert not ok and "SqlError: unknown table 'fail'" in output


@needs_landlock
def test_agent_exceptions_are_output_not_crashes():
    ok, output = run_code("print('before')\n1 / 0", _gateway([]), FAST)
    assert not ok and output == "before\nZeroDivisionError: division by zero\n"


@needs_landlock
def test_output_is_capped():
    ok, output = run_code("print('y' * 100_000)", _gateway([]), FAST)
    assert ok and len(output) < 2_100 and output.endswith("[output cut at 2000 characters]")


@needs_landlock
def test_wall_clock_and_cpu_limits_stop_the_child():
    ok, output = run_code("import time\ntime.sleep(60)", _gateway([]), SandboxLimits(wall_seconds=1.5))
    assert not ok and "wall-clock limit of 1.5 s" in output
    ok, output = run_code("while True:\n    pass", _gateway([]), FAST)
    assert not ok and "limit" in output


@needs_landlock
def test_a_child_that_stalls_mid_message_is_stopped_at_the_wall_clock():
    code = "import sys, time\nsys.__stdout__.write('{\"sql\": \"SELECT 1')\nsys.__stdout__.flush()\ntime.sleep(60)"
    ok, output = run_code(code, _gateway([]), SandboxLimits(wall_seconds=2.0))
    assert not ok and "wall-clock limit of 2 s" in output


@needs_landlock
def test_memory_limit_refuses_a_huge_allocation():
    ok, output = run_code("x = bytearray(4 << 30)", _gateway([]), FAST)
    assert not ok and "MemoryError" in output


@needs_landlock
def test_environment_is_cleared_and_scratch_is_removed_afterwards():
    os.environ["EHRGYM_SANDBOX_TEST_SECRET"] = "s3cret"
    ok, output = run_code("import os\nprint(os.getcwd())\nprint(sorted(os.environ))\nopen('f.txt', 'w').write('x')",
                          _gateway([]), FAST)
    scratch = output.splitlines()[0]
    assert ok and "s3cret" not in output and "EHRGYM_SANDBOX_TEST_SECRET" not in output and "HOME" not in output
    assert scratch.startswith("/tmp/ehrgym-py-") or "ehrgym-py-" in scratch
    assert not os.path.exists(scratch)


@needs_landlock
@pytest.mark.parametrize("code", [
    "open('/etc/hostname').read()",
    "import os\nos.listdir('/')",
    "import socket\nsocket.socket().connect(('127.0.0.1', 9))",
    "import subprocess\nsubprocess.run(['true'])",
    "import os\nos.fork()",
])
def test_files_network_and_processes_are_refused(code: str):
    ok, output = run_code(code, _gateway([]), FAST)
    assert not ok and "PermissionError: sandbox:" in output


@needs_landlock
def test_namespaces_are_used_when_this_machine_allows_them():
    command = _command(FAST)
    assert ("unshare" in command) == namespaces_available()
    if command[0] == "prlimit":
        assert {"--cpu=2:3", f"--as={1 << 30}:{1 << 30}", "--core=0:0"} <= set(command)
    if namespaces_available():
        ok, output = run_code("import os\nprint(os.getpid())", _gateway([]), FAST)
        assert ok and output.strip() == "1"  # a fresh pid namespace: the parent's processes are invisible


@needs_landlock
def test_landlock_alone_confines_files_programs_and_network(tmp_path):
    secret = tmp_path / "labels.jsonl"
    secret.write_text("hidden label")
    routes = [f"attempt('read_{name}', lambda: open({path!r}).read())" for name, path in
              [("hostname", "/etc/hostname"), ("secret", str(secret)), ("root", "/")]]
    routes += ["attempt('write_outside', lambda: open(os.path.dirname(os.getcwd()) + '/ehrgym-ll.txt', 'w'))",
               "attempt('list_root', lambda: os.listdir('/'))",
               "attempt('subprocess', lambda: subprocess.run(['/bin/true']))",
               "attempt('execv', lambda: os.execv('/bin/true', ['true']))",
               "attempt('posix_spawn', lambda: os.posix_spawn('/bin/true', ['true'], {}))",
               "attempt('python', lambda: subprocess.run([sys.executable, '-c', 'pass']))",
               "attempt('tcp', lambda: socket.create_connection(('127.0.0.1', 9), timeout=2))",
               "print('system', os.system('/bin/true'))",
               "attempt('polars_read', lambda: pl.read_csv('/etc/hostname', has_header=False))",
               "open('mine.txt', 'w').write('scratch is writable')",
               "print(open('mine.txt').read(), len(open(os.__file__).read()) > 0)"]
    ok, output = run_code(LANDLOCK_PROBE + "\n".join(routes), _gateway([]), FAST, audit_hook=False)
    lines = output.splitlines()
    assert ok and lines[-1] == "scratch is writable True", output
    assert [line for line in lines[:-1] if not line.endswith("denied 13")] == ["system 32512"], output  # sh: 127
    assert not (tmp_path.parent / "ehrgym-ll.txt").exists()


def test_without_landlock_the_tool_refuses(monkeypatch, tmp_path):
    seen: list[str] = []
    monkeypatch.setattr(sandbox, "landlock_available", lambda: False)
    ok, output = run_code("print(sql('SELECT 1'))", _gateway(seen), FAST)
    assert not ok and output.startswith("the Python sandbox needs Landlock") and seen == []
    broken = tmp_path / "landlock.py"  # the child itself refuses when its ruleset cannot be applied
    refusing = "\ndef confine(*roots):\n    raise OSError('no Landlock')\n"
    broken.write_text(sandbox.LANDLOCK_SOURCE.read_text() + refusing)
    monkeypatch.setattr(sandbox, "landlock_available", lambda: True)
    monkeypatch.setattr(sandbox, "LANDLOCK_SOURCE", broken)
    ok, output = run_code("print('ran unconfined')", _gateway(seen), FAST)
    assert not ok and output.startswith("the Python sandbox needs Landlock") and "(no Landlock)" in output
    assert "ran unconfined" not in output


def test_the_parent_cuts_or_rejects_the_end_message_whatever_the_child_sends():
    assert _ending({"done": True, "ok": True, "output": "x" * 10, "cut": True}, 10) == (
        True, "x" * 10 + "\n[output cut at 10 characters]")
    assert _ending({"done": True, "ok": True, "output": "x" * 11}, 10) is None  # longer than the child can send
    assert _ending({"done": True, "ok": True, "output": ["not", "text"]}, 10) is None
