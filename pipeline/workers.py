"""Worker processes die with their parent: a killed build or evaluation (Airflow's SIGKILL, the OOM killer) leaves
no orphan workers running on, holding gigabytes of frames."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (elsewhere: nothing to do, nothing done)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
