"""Cancellation reaches the daemon's tasks: Python 3.11's ``asyncio.wait_for`` returns
the awaited call's result when that call ends in the same loop step as the cancel (the
cancel is lost: fixed in 3.12, which builds it on ``asyncio.timeout``). A status watch
that lost its cancel polled its back end on after shutdown; the code uses
``asyncio.timeout``, and a stopping engine cancels again what still runs."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("bridge", "slurm_adapter", "flux_adapter", "k8s_adapter", "mpi_launch", "bench")


async def _lost_cancel(wait: str) -> bool:
    """Whether a task awaiting a future through ``wait`` goes on after being cancelled in
    the very step in which that future gets its result."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    went_on = False

    async def waiter() -> None:
        nonlocal went_on
        if wait == "wait_for":
            await asyncio.wait_for(fut, 60)
        else:
            async with asyncio.timeout(60):
                await fut
        went_on = True

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)  # the task now awaits fut
    fut.set_result(1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return went_on


async def test_the_interpreters_wait_for_loses_such_a_cancel_before_312() -> None:
    """Why the scan below exists: on 3.11 (the project's oldest) the cancel is lost."""
    assert await _lost_cancel("wait_for") == (sys.version_info < (3, 12))


async def test_asyncio_timeout_keeps_it() -> None:
    assert not await _lost_cancel("timeout")


def test_no_code_awaits_through_asyncio_wait_for() -> None:
    """No room of the daemon (nor a benchmark) awaits through ``asyncio.wait_for``."""
    pattern = re.compile(r"\basyncio\.wait_for\(|\bfrom asyncio import .*\bwait_for\b")
    found = [f"{path.relative_to(ROOT)}:{n}"
             for room in ROOMS for path in sorted((ROOT / room).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert found == [], f"use asyncio.timeout instead of wait_for at {found}"
