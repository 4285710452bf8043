"""The supervisor of one Python tool call: a subreaper that starts the sandbox and kills its whole tree at the end.

The parent runs this file's text with `python -I -S -c SOURCE COMMAND...`; it never imports project code. It marks
itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every process the sandbox starts stays its descendant whatever
that process does to its session, group or parent-death signal (double fork, setsid), and starts COMMAND on the
inherited channel. When the command exits, the parent sends SIGTERM or the parent dies, it SIGKILLs every
descendant until none is left, reaps them and exits with the command's status. It runs no agent code.
"""

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
CLEANUP_SECONDS = 5.0


class _Ended(Exception):
    """SIGTERM from the parent (or its death): the call is over."""


def _stop(signum, frame):
    raise _Ended()


def _descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of `root`, found through /proc's parent links."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            continue  # not a process, or it just ended
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, stack = [], [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            found.append(pid)
            stack.append(pid)
    return found


def _reap() -> bool:
    """Reap every ended child; False once no child is left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def kill_tree() -> None:
    """SIGKILL every descendant, again and again (a forking one adds more), until none is left or time is up."""
    deadline = time.monotonic() + CLEANUP_SECONDS
    while time.monotonic() < deadline:
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not _reap():
            return
        time.sleep(0.002)


def main() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # on the starting *thread*'s end: run_code is synchronous
    signal.signal(signal.SIGTERM, _stop)
    status = 1
    try:
        if os.getppid() == 1:
            return status  # the parent died before the death signal was set
        child = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0), os.dup2(devnull, 1)  # only the sandbox holds the channel: its exit is the parent's EOF
        while True:
            pid, code = os.waitpid(-1, 0)
            if pid == child:
                status = os.waitstatus_to_exitcode(code)
                break
    except (_Ended, ChildProcessError, OSError):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_tree()
    return status


sys.exit(main())
