"""Landlock through ctypes: the ABI this kernel offers and a deny-by-default ruleset for the Python tool's child.

This file imports nothing from the project: the sandbox prepends its text to the child's source (`python -I -c`),
and the parent imports it to check, before starting a child, that the kernel can confine one.
"""

import ctypes
import os

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
PR_SET_NO_NEW_PRIVS, CREATE_RULESET_VERSION, RULE_PATH_BENEATH = 38, 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}  # + REFER, TRUNCATE, IOCTL
NET_TCP_BIND_CONNECT, SCOPE_ABSTRACT_UNIX_AND_SIGNAL = 0b11, 0b11  # ABI 4 and ABI 6
READ_ONLY = FS_READ_FILE | FS_READ_DIR
LANDLOCK_MISSING = (
    "the Python sandbox needs Landlock (Linux 5.13 or later, with Landlock enabled) to confine agent "
    "code, and this machine does not provide it; the code was not run"
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version of the running kernel, 0 when Landlock is missing or disabled."""
    try:
        version = _syscall().syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _handled_fs(abi: int) -> int:
    return FS_RIGHTS_BY_ABI[max(k for k in FS_RIGHTS_BY_ABI if k <= abi)]


def confine(read_roots, write_roots) -> int:
    """Restrict this process for good: read (never execute) beneath `read_roots`, read and write (never execute)
    beneath `write_roots`, nothing elsewhere, no TCP bind/connect, no abstract unix sockets or signals leaving the
    domain. Returns the ABI used; raises OSError when the kernel cannot confine the process."""
    abi, libc = landlock_abi(), _syscall()
    if abi < 1:
        raise OSError("Landlock is not available on this kernel (or it is disabled)")
    handled = _handled_fs(abi)
    net, scoped = NET_TCP_BIND_CONNECT if abi >= 4 else 0, SCOPE_ABSTRACT_UNIX_AND_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(handled, net, scoped)
    size = ctypes.sizeof(attr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for roots, access in ((read_roots, READ_ONLY), (write_roots, handled & ~FS_EXECUTE)):
            for root in roots:
                _allow(libc, ruleset, root, access)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _allow(libc, ruleset: int, root: str, access: int) -> None:
    """One path-beneath rule; a missing path is skipped, a file gets only the rights a file can carry."""
    try:
        fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(root):
            access &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (1 << 14) | (1 << 15)
        rule = _PathBeneathAttr(access, fd)
        if libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {root}")
    finally:
        os.close(fd)
