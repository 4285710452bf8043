"""The Python tool's sandbox: output capture, sql() through a callback, limits, a cleared environment, no files,
Landlock as the confinement (checked alone, without the audit hook) and the refusal to run without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.env import sandbox
from pipeline.env.gateway import QueryOutcome
from pipeline.env.sandbox import (
    SandboxLimits,
    _command,
    _ending,
    landlock_available,
    namespaces_available,
    run_code,
    scratch_mount_available,
)
from pipeline.env.scratch import remove_tree, usage

FAST = SandboxLimits(cpu_seconds=2, wall_seconds=5.0, memory_bytes=1 << 30, output_chars=2_000)
needs_landlock = pytest.mark.skipif(
    not landlock_available(),
    reason="this kernel offers no Landlock, so the Python "
    "tool refuses to run code (test_without_landlock_the_tool_refuses still runs)",
)
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
    code = 'import sys, time\nsys.__stdout__.write(\'{"sql": "SELECT 1\')\nsys.__stdout__.flush()\ntime.sleep(60)'
    ok, output = run_code(code, _gateway([]), SandboxLimits(wall_seconds=2.0))
    assert not ok and "wall-clock limit of 2 s" in output


@needs_landlock
def test_memory_limit_refuses_a_huge_allocation():
    ok, output = run_code("x = bytearray(4 << 30)", _gateway([]), FAST)
    assert not ok and "MemoryError" in output


@needs_landlock
def test_environment_is_cleared_and_scratch_is_removed_afterwards():
    os.environ["EHRGYM_SANDBOX_TEST_SECRET"] = "s3cret"
    ok, output = run_code(
        "import os\nprint(os.getcwd())\nprint(sorted(os.environ))\nopen('f.txt', 'w').write('x')", _gateway([]), FAST
    )
    scratch = output.splitlines()[0]
    assert ok and "s3cret" not in output and "EHRGYM_SANDBOX_TEST_SECRET" not in output and "HOME" not in output
    assert scratch.startswith("/tmp/ehrgym-py-") or "ehrgym-py-" in scratch
    assert not os.path.exists(scratch)


@needs_landlock
@pytest.mark.parametrize(
    "code",
    [
        "open('/etc/hostname').read()",
        "import os\nos.listdir('/')",
        "import socket\nsocket.socket().connect(('127.0.0.1', 9))",
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.fork()",
    ],
)
def test_files_network_and_processes_are_refused(code: str):
    ok, output = run_code(code, _gateway([]), FAST)
    assert not ok and "PermissionError: sandbox:" in output


@needs_landlock
def test_namespaces_are_used_when_this_machine_allows_them():
    command = _command(FAST)
    programs = [os.path.basename(part) for part in command if part.startswith("/")]
    assert command[4] == sandbox.SUPERVISOR_SOURCE.read_text()  # the subreaper comes first
    assert ("unshare" in programs) == namespaces_available()
    if "prlimit" in programs:
        assert {"--cpu=2:3", f"--as={1 << 30}:{1 << 30}", "--core=0:0"} <= set(command)
    if namespaces_available():
        ok, output = run_code("import os\nprint(os.getpid())", _gateway([]), FAST)
        assert ok and output.strip() == "1"  # a fresh pid namespace: the parent's processes are invisible


@needs_landlock
def test_landlock_alone_confines_files_programs_and_network(tmp_path):
    secret = tmp_path / "labels.jsonl"
    secret.write_text("hidden label")
    routes = [
        f"attempt('read_{name}', lambda: open({path!r}).read())"
        for name, path in [("hostname", "/etc/hostname"), ("secret", str(secret)), ("root", "/")]
    ]
    routes += [
        "attempt('write_outside', lambda: open(os.path.dirname(os.getcwd()) + '/ehrgym-ll.txt', 'w'))",
        "attempt('list_root', lambda: os.listdir('/'))",
        "attempt('subprocess', lambda: subprocess.run(['/bin/true']))",
        "attempt('execv', lambda: os.execv('/bin/true', ['true']))",
        "attempt('posix_spawn', lambda: os.posix_spawn('/bin/true', ['true'], {}))",
        "attempt('python', lambda: subprocess.run([sys.executable, '-c', 'pass']))",
        "attempt('tcp', lambda: socket.create_connection(('127.0.0.1', 9), timeout=2))",
        "print('system', os.system('/bin/true'))",
        "attempt('polars_read', lambda: pl.read_csv('/etc/hostname', has_header=False))",
        "open('mine.txt', 'w').write('scratch is writable')",
        "print(open('mine.txt').read(), len(open(os.__file__).read()) > 0)",
    ]
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
        True,
        "x" * 10 + "\n[output cut at 10 characters]",
    )
    assert _ending({"done": True, "ok": True, "output": "x" * 11}, 10) is None  # longer than the child can send
    assert _ending({"done": True, "ok": True, "output": ["not", "text"]}, 10) is None


# --- issue 19: a sandbox that ends with its call -----------------------------------------------------------------

ISOLATIONS = ["namespaces", "no_namespaces"]  # the machine's own setup, and the fallback of a host without unshare


@pytest.fixture(params=ISOLATIONS)
def isolation(request, monkeypatch):
    """Run a test with this machine's namespaces (skipped where there are none) and without them."""
    if request.param == "namespaces" and not namespaces_available():
        pytest.skip("unshare does not work here; the no_namespaces case covers this host")
    if request.param == "no_namespaces":
        monkeypatch.setattr(sandbox, "namespaces_available", lambda: False)
    return request.param


def _named(token: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == token:
                found.append(int(pid))
        except OSError:
            pass
    return found


@needs_landlock
def test_no_process_of_the_call_survives_it(isolation):
    """A detached grandchild (new session, parent-death signal cleared, double fork) dies with the call. Landlock
    alone (no audit hook) so the fork itself is allowed, as native code loaded past the hook would be."""
    token = f"ehrorph{os.getpid() % 100_000:05d}"
    grandchild = f"libc.prctl(15, b'{token}')\n        open('alive', 'w').close()\n        time.sleep(60)"
    code = (
        f"import os, time, ctypes\nlibc = ctypes.CDLL(None)\nif os.fork() == 0:\n    os.setsid()\n"
        f"    libc.prctl(1, 0)\n    if os.fork() == 0:\n        {grandchild}\n    os._exit(0)\n"
        "while not os.path.exists('alive'):\n    time.sleep(0.01)\nprint('detached')"
    )  # alive when the call ends
    try:
        ok, output = run_code(code, _gateway([]), FAST, audit_hook=False)
        assert ok and output.strip() == "detached", output
        assert _named(token) == []
    finally:
        for pid in _named(token):  # only when the test fails: end what it started
            os.kill(pid, 9)


# --- no native code from writable paths ----------------------------------------------------------------------------

COPY_EXTENSION = (
    "import os, sys, importlib.machinery as mach, importlib.util as u\n"
    "src = [p for p in sys.path if p.endswith('lib-dynload')][0]\n"
    "src += '/_json' + mach.EXTENSION_SUFFIXES[0]\n"
    "data = open(src, 'rb').read()\nopen('{name}', 'wb').write(data)\n"
)
NATIVE_LOADS = {
    "import_from_sys_path": (
        "_json.cpython-311-x86_64-linux-gnu.so",
        "sys.modules.pop('_json', None)\n"
        "sys.path.insert(0, os.getcwd())\nimport _json\nprint('loaded', _json.__file__)",
    ),
    "spec_from_file_location": (
        "evil.so",
        "spec = u.spec_from_file_location('_json', os.path.abspath('evil.so'))\n"
        "print('loaded', u.module_from_spec(spec))",
    ),
    "extension_loader_by_name": (
        "evil.bin",
        "loader = mach.ExtensionFileLoader('_json', os.path.abspath('evil.bin'))\n"
        "print('loaded', u.module_from_spec(u.spec_from_loader('_json', loader)))",
    ),
    "polars_plugin": (
        "libevil.so",
        "from polars.plugins import register_plugin_function as plug\n"
        "e = plug(plugin_path=os.path.abspath('libevil.so'), function_name='f', args=pl.col('a'))\n"
        "print('loaded', pl.DataFrame({'a': [1]}).select(e))",
    ),
}


@needs_landlock
@pytest.mark.parametrize("route", sorted(NATIVE_LOADS))
def test_native_code_copied_into_scratch_does_not_load(route: str):
    """A real extension module of the interpreter, copied into scratch under another name, loads by no route."""
    name, load = NATIVE_LOADS[route]
    ok, output = run_code(COPY_EXTENSION.replace("{name}", name) + load, _gateway([]), FAST)
    assert not ok and "loaded" not in output, output
    refusals = ["PermissionError: sandbox: no native code from", "failed to map segment", "dlopen failed"]
    assert any(refusal in output for refusal in refusals), output


@needs_landlock
@pytest.mark.skipif(not scratch_mount_available(), reason="no tmpfs mount in a namespace here: the audit hook alone")
@pytest.mark.parametrize("route", sorted(NATIVE_LOADS))
def test_the_noexec_scratch_alone_refuses_native_code(route: str):
    """Without the audit hook the kernel still refuses to map code from the noexec scratch tmpfs."""
    name, load = NATIVE_LOADS[route]
    ok, output = run_code(COPY_EXTENSION.replace("{name}", name) + load, _gateway([]), FAST, audit_hook=False)
    assert not ok and ("failed to map segment" in output or "dlopen failed" in output), output


@needs_landlock
def test_native_code_from_a_memory_file_is_refused_by_the_hook():
    code = (
        COPY_EXTENSION.replace("open('{name}', 'wb').write(data)\n", "")
        + "fd = os.memfd_create('x')\nos.write(fd, data)\npath = '/proc/self/fd/%d' % fd\n"
        "spec = u.spec_from_loader('_json', mach.ExtensionFileLoader('_json', path))\n"
        "print('loaded', u.module_from_spec(spec))"
    )
    ok, output = run_code(code, _gateway([]), FAST)
    assert not ok and "PermissionError: sandbox: no native code from '/proc/self/fd/" in output, output


# --- scratch removal that cannot fail, and a total disk quota ------------------------------------------------------


def _nest(root: Path, depth: int, name: str = "dd") -> None:
    """`depth` nested directories made through descriptors (the full path is far beyond PATH_MAX), each read-only."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, 0o500, dir_fd=fd)
        fd, parent = os.open(name, os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)


def test_scratch_removal_needs_no_recursion_and_follows_no_link(tmp_path):
    """Deeper than the recursion limit and PATH_MAX, read-only files and folders, symlinks out: all removed, and
    nothing a link points at is touched."""
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file.txt").write_text("must survive")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _nest(scratch, 3_000)
    (scratch / "ro.txt").write_text("x")
    (scratch / "ro.txt").chmod(0o400)
    (scratch / "link_dir").symlink_to(outside / "keep")
    (scratch / "link_file").symlink_to(outside / "keep" / "file.txt")
    (scratch / ".ehrgym-flat-0").mkdir()  # a name the flattening would pick: it must not collide
    (scratch / ".ehrgym-flat-0" / "x").write_text("x")
    scratch.chmod(0o500)
    assert remove_tree(str(scratch)) and not scratch.exists()
    assert (outside / "keep" / "file.txt").read_text() == "must survive"
    assert remove_tree(str(scratch))  # already gone: still True, never raises


def test_scratch_usage_counts_bytes_and_entries_and_stops_past_the_cap(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"0" * 100_000)
    size, entries = usage(str(tmp_path), 100)
    assert entries == 2 and 100_000 <= size < 200_000
    for i in range(50):
        (tmp_path / f"e{i}").touch()
    assert usage(str(tmp_path), 10)[1] == 11  # counting stops just past the cap
    _nest(tmp_path / "a", 2_100, "d")  # > PATH_MAX: counts as past any cap
    assert usage(str(tmp_path), 10_000)[1] == 10_001
    assert remove_tree(str(tmp_path / "a"))


@needs_landlock
def test_a_deeply_nested_scratch_is_removed_after_the_call(isolation):
    """The old cleanup (shutil.rmtree) raised RecursionError here and left the folder."""
    code = (
        "import os\nprint(os.getcwd())\nfor _ in range(1_500):\n    os.mkdir('d', 0o700)\n    os.chdir('d')\n"
        "open('leaf.txt', 'w').write('x')\nos.chmod('.', 0o500)\nprint('nested')"
    )
    ok, output = run_code(code, _gateway([]), FAST, audit_hook=False)
    assert ok and output.splitlines()[1] == "nested", output
    assert not os.path.exists(output.splitlines()[0])


@needs_landlock
@pytest.mark.parametrize("what", ["bytes", "entries"])
def test_scratch_has_a_total_quota(isolation, what: str):
    """Files each under the per-file cap, or many empty ones, still hit a total quota per call: the kernel's (tmpfs)
    with namespaces, the parent's watchdog without."""
    limits = SandboxLimits(
        cpu_seconds=3,
        wall_seconds=5.0,
        memory_bytes=1 << 30,
        file_bytes=4 << 20,
        scratch_bytes=8 << 20,
        scratch_entries=200,
    )
    write = {
        "bytes": "for i in range(6):\n    open(f'f{i}', 'wb').write(b'0' * (3 << 20))",
        "entries": "for i in range(400):\n    open(f'f{i}', 'w').close()",
    }[what]
    ok, output = run_code(f"import time\n{write}\nprint('all written')\ntime.sleep(3)", _gateway([]), limits)
    assert not ok and "all written" not in output, output
    assert "No space left on device" in output or "passed the disk quota (8 MB, 200 files" in output, output
    assert ("No space left" in output) == (isolation == "namespaces" and scratch_mount_available())
