"""bridge/subproc.py: children started by CPython, the same on asyncio's loop and on
uvloop (which takes no ``umask``/``user``/``group``), killed with a cancelled call."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from bridge import eventloop, subproc
from bridge.eventloop import EventLoopKind

LOOPS: list[EventLoopKind] = ["asyncio", "uvloop"]


@pytest.mark.parametrize("kind", LOOPS)
def test_output_status_stdin_and_umask(kind: EventLoopKind) -> None:
    code = ("import os, sys; data = sys.stdin.read(); old = os.umask(0); "
            "print(oct(old), data); print('err', file=sys.stderr); sys.exit(3)")
    done = eventloop.run(subproc.communicate(
        [sys.executable, "-c", code], stdin=b"hello", umask=0o027, cwd="/"), kind)
    assert done == (3, b"0o27 hello\n", b"err\n")


@pytest.mark.parametrize("kind", LOOPS)
def test_without_stdin_the_child_reads_dev_null(kind: EventLoopKind) -> None:
    code = "import sys; print(repr(sys.stdin.read()))"
    assert eventloop.run(subproc.communicate([sys.executable, "-c", code]), kind) == (
        0, b"''\n", b"")


@pytest.mark.parametrize("kind", LOOPS)
def test_a_missing_program_is_an_oserror(kind: EventLoopKind, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        eventloop.run(subproc.communicate([str(tmp_path / "no-such-program")]), kind)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize("kind", LOOPS)
def test_a_timed_out_call_kills_its_child(kind: EventLoopKind, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = (f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); "
            "time.sleep(600)")

    async def call() -> None:
        async with asyncio.timeout(60):
            task = asyncio.ensure_future(subproc.communicate([sys.executable, "-c", code]))
            while not pidfile.exists() or not pidfile.read_text():  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # polls a file the child writes: no event to wait on
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    eventloop.run(call(), kind)
    # communicate returned only after the kill was reaped (or kill_wait passed).
    assert not _alive(int(pidfile.read_text()))


@pytest.mark.parametrize("kind", LOOPS)
def test_calls_run_side_by_side(kind: EventLoopKind) -> None:
    async def many() -> list[tuple[int, bytes, bytes]]:
        return await asyncio.gather(*(subproc.communicate(
            ["/bin/sh", "-c", f"echo {i}"], env={"PATH": os.defpath}) for i in range(20)))

    assert [out for _, out, _ in eventloop.run(many(), kind)] == [
        f"{i}\n".encode() for i in range(20)]
