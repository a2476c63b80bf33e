"""bridge/memtrim.py on the test bed's glibc: the arena limit holds for a process whose
threads allocate at once, an operator's MALLOC_ARENA_MAX stands, malloc_trim is found
and called, and the periodic task survives a failing trim and stops when cancelled."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import memtrim

ROOT = Path(__file__).resolve().parents[2]

# 16 threads allocate small blocks at once (glibc then gives a contended thread a new
# arena); malloc_stats() prints one "Arena N:" block per arena on stderr.
ARENAS = """
import ctypes, sys, threading
sys.path.insert(0, {root!r})
from bridge import memtrim
print(memtrim.limit_arenas(2))
start = threading.Barrier(16)
def work():
    start.wait()
    for _ in range(200):
        blocks = [bytearray(512) for _ in range(200)]
        del blocks
threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()
"""


def arenas(env: dict[str, str]) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", ARENAS.format(root=str(ROOT))],
                          capture_output=True, text=True, timeout=120, check=True,
                          env={"PATH": "/usr/bin:/bin", **env})
    return done.stdout.strip(), done.stderr.count("Arena ")


def test_the_arena_limit_holds_while_threads_allocate() -> None:
    took, count = arenas({})
    assert took == "True" and 1 <= count <= 2


def test_an_operators_malloc_arena_max_stands() -> None:
    took, _count = arenas({"MALLOC_ARENA_MAX": "4"})
    assert took == "False"


def test_malloc_trim_is_found_and_called() -> None:
    assert memtrim._function("malloc_trim", [], int) is not None  # glibc here
    blocks = [bytearray(4096) for _ in range(20_000)]  # ~80 MB, then freed
    del blocks
    assert isinstance(memtrim.malloc_trim(), bool)


async def test_the_trim_task_survives_a_failure_and_stops_when_cancelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    third = asyncio.Event()
    loop = asyncio.get_running_loop()

    def trim() -> bool:  # runs in a worker thread
        calls.append(1)
        if len(calls) == 3:
            loop.call_soon_threadsafe(third.set)
        raise OSError("trim failed")  # logged; the task goes on

    monkeypatch.setattr(memtrim, "malloc_trim", trim)
    task = asyncio.create_task(memtrim.trim_forever(0.001))
    await asyncio.wait_for(third.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_trim_asked_for_comes_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """trim_soon wakes the periodic task (which would otherwise wait an hour); two asks
    before it runs give one trim, not a pile; without the task it does nothing."""
    memtrim.trim_soon()  # no task: nothing
    loop = asyncio.get_running_loop()
    trimmed = asyncio.Event()
    calls: list[int] = []

    def fake_trim() -> bool:  # in the worker thread
        calls.append(1)
        loop.call_soon_threadsafe(trimmed.set)
        return True

    monkeypatch.setattr(memtrim, "malloc_trim", fake_trim)
    task = asyncio.create_task(memtrim.trim_forever(3600))
    try:
        for _ in range(10_000):  # the task's first steps (no timing: it only has to run)
            if memtrim._soon is not None:
                break
            await asyncio.sleep(0)
        assert memtrim._soon is not None
        memtrim.trim_soon()
        memtrim.trim_soon()
        await asyncio.wait_for(trimmed.wait(), 10)
        assert calls == [1]
        trimmed.clear()
        memtrim.trim_soon()
        await asyncio.wait_for(trimmed.wait(), 10)
        assert calls == [1, 1]
        await asyncio.to_thread(memtrim.trim_soon)  # not from another thread: no loop there
        await asyncio.sleep(0)
        assert not memtrim._soon[1].is_set()  # type: ignore[index]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert memtrim._soon is None
