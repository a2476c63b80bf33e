"""bridge/memtrim.py: the daemon gives freed heap memory back on glibc (the test bed's
C library), and the periodic task stops when cancelled."""

from __future__ import annotations

import asyncio

import pytest

from bridge import memtrim


def test_glibc_takes_the_arena_limit_and_trims() -> None:
    assert memtrim.limit_arenas(2) is True
    blocks = [bytearray(64 * 1024) for _ in range(2000)]  # ~128 MB, then freed
    del blocks
    assert isinstance(memtrim.malloc_trim(), bool)


async def test_the_trim_task_runs_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    third = asyncio.Event()
    loop = asyncio.get_running_loop()

    def trim() -> bool:  # runs in a worker thread
        calls.append(1)
        if len(calls) == 3:
            loop.call_soon_threadsafe(third.set)
        return True

    monkeypatch.setattr(memtrim, "malloc_trim", trim)
    task = asyncio.create_task(memtrim.trim_forever(0.001))
    await asyncio.wait_for(third.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
