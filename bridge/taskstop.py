"""Stopping a set of asyncio tasks within a grace period.

Why cancel more than once: a cancellation can be lost on its way (Python 3.11's
``asyncio.wait_for`` returns its result when the awaited call ends in the same step as
the cancel, and a library may do the same), and a task that lost its only one would go
on (a status watch polling its back end) until the grace ran out.

Contract: :func:`cancel_and_wait` cancels every task, again every ``again`` seconds
while it runs, waits at most ``grace`` seconds, retrieves the end of each task that
ended (a task's end is no news at shutdown) and returns those still running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]], grace: float,
                          again: float) -> set[asyncio.Task[object]]:
    """See the module docstring."""
    pending = set(tasks)
    deadline = time.monotonic() + grace
    while pending and (left := deadline - time.monotonic()) > 0:
        for task in pending:
            task.cancel()
        done, pending = await asyncio.wait(pending, timeout=min(left, again))
        for task in done:
            if not task.cancelled():
                task.exception()
    return pending
