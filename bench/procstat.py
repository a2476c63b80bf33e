"""A process's CPU time from ``/proc/PID/stat``, for the benchmarks that measure other
processes (a daemon, a server, a sender): user + system seconds, all threads."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_seconds"]


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of process ``pid`` so far (``children``: with those of
    its children it has waited for, e.g. the commands a daemon runs). OSError when the
    process is gone (a zombie's figures stay readable until it is reaped)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")
