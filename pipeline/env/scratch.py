"""The Python tool's scratch folder: its disk usage (for the quota watchdog) and a removal that cannot be defeated.

Both walk without recursion and without long paths: agent code can nest directories far beyond Python's recursion
limit and PATH_MAX, drop its own permissions and plant symlinks to anywhere. Removal flattens the tree into the
scratch root (a directory's entries are renamed up, then the empty directory is removed), working only through
descriptors of the root and of one directory at a time, never following a symlink.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def usage(path: str, max_entries: int) -> tuple[int, int]:
    """(bytes allocated, entries) beneath `path`; stops counting past `max_entries`. A path too long to walk
    counts as `max_entries + 1` (it can only come from nesting beyond any quota)."""
    total, count, stack = 0, 0, [path]
    while stack and count <= max_entries:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in itertools.islice(entries, max_entries + 1 - count):
                    count += 1
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError as err:
            if err.errno == errno.ENAMETOOLONG:
                return total, max_entries + 1
    return total, count


def remove_tree(path: str) -> bool:
    """Remove `path` and all beneath it; True when it is gone. Never raises and never leaves `path`'s parent."""
    try:
        os.chmod(path, 0o700)
        root = os.open(path, _DIRECTORY)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        _empty(root)
    finally:
        os.close(root)
    try:
        os.rmdir(path)
    except OSError:
        return False
    return True


def _empty(root: int) -> None:
    """Flatten and remove every entry of the open directory `root`; stops when a pass removes nothing."""
    names, previous = itertools.count(), None
    while (current := sorted(os.listdir(root))) and current != previous:
        previous = current
        for name in current:
            try:
                _remove_entry(root, name, names)
            except OSError:
                pass  # retried on the next pass; a pass with no progress ends the loop


def _remove_entry(root: int, name: str, names: itertools.count) -> None:
    """Unlink a file or symlink; a directory gets its entries moved up into `root`, then is removed empty."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=root, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=root)
        return
    os.chmod(name, 0o700, dir_fd=root)  # a directory (checked above, and its writer is dead): no symlink followed
    directory = os.open(name, _DIRECTORY, dir_fd=root)
    try:
        for child in os.listdir(directory):
            os.rename(child, _free_name(root, names), src_dir_fd=directory, dst_dir_fd=root)
    finally:
        os.close(directory)
    os.rmdir(name, dir_fd=root)


def _free_name(root: int, names: itertools.count) -> str:
    while True:
        name = f".ehrgym-flat-{next(names)}"
        try:
            os.stat(name, dir_fd=root, follow_symlinks=False)
        except FileNotFoundError:
            return name
