"""The daemon waits for its engine to be ready, or for anything that means it never
will be (bridge/daemon.py ``until_ready``): an engine that failed while starting its
back ends, or SIGTERM while it adopts jobs, must not leave the daemon waiting."""

from __future__ import annotations

import asyncio

from bridge.daemon import until_ready


async def test_ready_first() -> None:
    ready, stop = asyncio.Event(), asyncio.Event()
    stopped = asyncio.create_task(stop.wait())
    asyncio.get_running_loop().call_soon(ready.set)
    assert await until_ready(ready, {stopped}) is True
    stopped.cancel()


async def test_an_engine_that_failed_before_ready_ends_the_wait() -> None:
    async def engine() -> None:
        raise ValueError("unexpected kwargs: umask")

    ready = asyncio.Event()
    task = asyncio.create_task(engine())
    assert await until_ready(ready, {task}) is False
    assert isinstance(task.exception(), ValueError)


async def test_sigterm_before_ready_ends_the_wait() -> None:
    ready, stop = asyncio.Event(), asyncio.Event()
    stopped = asyncio.create_task(stop.wait())
    never = asyncio.create_task(asyncio.Event().wait())
    asyncio.get_running_loop().call_soon(stop.set)
    assert await until_ready(ready, {stopped, never}) is False
    assert not ready.is_set()
    never.cancel()
