"""bridge/subproc.py: children started by CPython, the same on asyncio's loop and on
uvloop (which takes no ``umask``/``user``/``group``), killed with their process group
by a cancelled call, always reaped."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

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


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("child-")]


@pytest.mark.parametrize("kind", LOOPS)
def test_a_descendant_holding_the_pipes_is_killed_with_the_child(
        kind: EventLoopKind, tmp_path: Path) -> None:
    """The child leaves a background process holding stdout and stderr: a timed-out call
    kills the whole group, and leaves no zombie, no waiting thread, no pipe open."""
    pidfile = tmp_path / "pids"
    script = f"sleep 600 & echo $$ $! > {pidfile}; exec sleep 600"

    async def call() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(60):
                task = asyncio.ensure_future(subproc.communicate(["/bin/sh", "-c", script]))
                while not pidfile.exists() or len(pidfile.read_text().split()) < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)  # polls a file the child writes
                raise TimeoutError
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    fds = len(os.listdir("/proc/self/fd"))
    eventloop.run(call(), kind)
    child, grandchild = map(int, pidfile.read_text().split())
    assert not _alive(child) and not Path(f"/proc/{child}").exists()  # reaped
    assert not _alive(grandchild)
    assert _threads() == []
    assert len(os.listdir("/proc/self/fd")) <= fds


@pytest.mark.parametrize("kind", LOOPS)
def test_megabytes_in_and_out(kind: EventLoopKind) -> None:
    data = os.urandom(4 << 20)
    code, out, err = eventloop.run(subproc.communicate(["/bin/cat"], stdin=data), kind)
    assert (code, out == data, err) == (0, True, b"")


def test_the_keywords_it_sets_itself_are_refused() -> None:
    with pytest.raises(TypeError, match="stdout, text"):
        eventloop.run(subproc.communicate(["/bin/true"], stdout=None, text=True), "asyncio")


def test_no_thread_to_wait_with_kills_the_child(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    started: list[int] = []
    spawn = subproc.start

    def recorded(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = spawn(argv, **kwargs)
        started.append(proc.pid)
        return proc

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(subproc, "start", recorded)
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    with pytest.raises(OSError, match="cannot supervise /bin/sleep: can't start new thread"):
        eventloop.run(subproc.communicate(["/bin/sleep", "600"]), "asyncio")
    assert not Path(f"/proc/{started[0]}").exists()  # killed and reaped


def _wait_until(predicate: Any, what: str) -> None:
    """Polls a condition of other processes and threads (no event to wait on)."""
    for _ in range(1000):
        if predicate():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("kind", LOOPS)
def test_unread_stdin_then_a_timeout_then_another_command(kind: EventLoopKind) -> None:
    """A child that never reads megabytes of stdin is killed at the timeout, and the
    next command's pipes work (nothing of the first is left registered or closed
    twice)."""
    async def calls() -> tuple[int, bytes, bytes]:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await subproc.communicate(["/bin/sleep", "600"], stdin=b"x" * (4 << 20))
        return await subproc.communicate(["/bin/cat"], stdin=b"next")

    assert eventloop.run(calls(), kind) == (0, b"next", b"")
    _wait_until(lambda: _threads() == [], "the supervisors to end")


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_a_cancel_right_after_the_start_closes_nothing_of_others(
        kind: EventLoopKind, turns: int) -> None:
    async def call() -> None:
        others = [os.open("/dev/null", os.O_RDONLY) for _ in range(4)]
        task = asyncio.ensure_future(subproc.communicate(["/bin/sleep", "600"],
                                                         stdin=b"x" * (1 << 20)))
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        mine = [os.open("/dev/null", os.O_RDONLY) for _ in range(4)]
        for fd in others + mine:
            os.fstat(fd)  # still open: raises if it was closed
            os.close(fd)

    eventloop.run(call(), kind)
    _wait_until(lambda: _threads() == [], "the supervisor to end")


@pytest.mark.parametrize("kind", LOOPS)
def test_an_escaped_descendant_holding_the_pipes_delays_nothing_past_kill_wait(
        kind: EventLoopKind, tmp_path: Path) -> None:
    """A grandchild in a session of its own keeps the pipes open: the cancelled call
    ends within kill_wait, and the supervisor closes the pipes and reaps the child."""
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 10 & echo $$ > {pidfile}; exec sleep 600"

    async def call() -> float:
        task = asyncio.ensure_future(subproc.communicate(["/bin/sh", "-c", script],
                                                         kill_wait=0.5))
        while not pidfile.exists() or not pidfile.read_text():  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # polls a file the child writes
        loop = asyncio.get_running_loop()
        begun = loop.time()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return loop.time() - begun

    assert eventloop.run(call(), kind) < 5
    child = int(pidfile.read_text())
    _wait_until(lambda: not Path(f"/proc/{child}").exists(), "the child to be reaped")
    _wait_until(lambda: _threads() == [], "the supervisor to end")
