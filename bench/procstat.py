"""A process's CPU time from ``/proc/PID/stat``, for the benchmarks that measure other
processes (a daemon, a server, a sender): user + system seconds, all threads; and
each thread's from ``/proc/PID/task/TID/stat``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

__all__ = ["busiest", "cpu_seconds", "thread_cpu_seconds"]

K = TypeVar("K")


def _ticks(stat: Path, children: bool = False) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of process ``pid`` so far (``children``: with those of
    its children it has waited for, e.g. the commands a daemon runs). OSError when the
    process is gone (a zombie's figures stay readable until it is reaped)."""
    return _ticks(Path(f"/proc/{pid}/stat"), children)


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """Thread id -> user + system CPU seconds so far, for each live thread of process
    ``pid`` (a thread that ends between two readings takes its figures with it)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = _ticks(task / "stat")
        except (OSError, ValueError):
            continue  # ended while being read
    return out


def busiest(before: Mapping[K, float], after: Mapping[K, float]) -> float:
    """The most CPU seconds one thread used between two :func:`thread_cpu_seconds`
    readings, keyed alike (a thread started in between counts from zero)."""
    return max((t - before.get(tid, 0.0) for tid, t in after.items()), default=0.0)
