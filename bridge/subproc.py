"""Child processes on any event loop: CPython's own spawn, the pipes on the loop.

Contract:

* :func:`communicate` starts ``argv`` with :class:`subprocess.Popen` and the keyword
  arguments given (``umask``, ``user``, ``group``, ``extra_groups``, ``pass_fds``,
  ``cwd``, ``env`` …: all that CPython's spawn takes; without ``user``/``group``/
  ``extra_groups`` CPython makes the child with ``vfork``, see :mod:`bridge.runas`),
  writes ``stdin`` (None: the child's standard input is ``/dev/null``), and returns
  ``(returncode, stdout, stderr)`` once the child has ended and both pipes are closed.
  The keywords that this function sets itself (the standard streams, ``text``,
  ``close_fds``, the process group) are refused with :class:`TypeError`.
* It is the same on every asyncio loop. The daemon runs on uvloop
  (:mod:`bridge.eventloop`), whose ``subprocess_exec`` takes none of ``umask``,
  ``user``, ``group``, ``extra_groups``, so the daemon's own commands are not started
  through the loop: the start is CPython's, in the caller's thread (as asyncio's own
  loop does it); the pipes are read and written by the loop; the child's end is waited
  for in a thread of its own (``waitid`` with ``WNOWAIT``: the thread never reaps) and
  the child is reaped in the loop's thread. Until then its pid cannot be reused, so a
  kill never reaches another process.
* Each child leads a process group of its own. Cancelled (the caller's timeout, or its
  own cancellation), the whole group is killed (SIGKILL: the child and what it started
  without leaving the group), the pipes are closed, and the child is reaped, waiting
  ``kill_wait`` seconds at most for it to end; then the cancellation goes on. A child
  that outlived even that (in uninterruptible sleep) is reaped by its waiting thread.
* An :class:`OSError` of the start (no such program, not executable) is raised as is;
  so is one for a waiting thread that cannot be started, after the child was killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from typing import IO, Any

__all__ = ["KILL_WAIT", "communicate", "start"]

#: Seconds a killed child is waited for before the cancellation goes on regardless.
KILL_WAIT = 5.0

#: How a child is started (a test may wrap it to see the keyword arguments).
start = subprocess.Popen

_OWN_KEYWORDS = frozenset({"stdin", "stdout", "stderr", "text", "universal_newlines",
                           "encoding", "errors", "close_fds", "process_group",
                           "start_new_session", "preexec_fn"})


async def communicate(argv: Sequence[str], *, stdin: bytes | None = None,
                      kill_wait: float = KILL_WAIT, **popen: Any) -> tuple[int, bytes, bytes]:
    """``(returncode, stdout, stderr)`` of ``argv`` (see the module docstring)."""
    own = sorted(_OWN_KEYWORDS & popen.keys())
    if own:
        raise TypeError(f"communicate() sets {', '.join(own)} itself")
    proc = start(list(argv), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0, **popen)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    try:
        threading.Thread(target=_wait_for_end, args=(proc.pid, loop, ended),
                         name=f"child-{proc.pid}", daemon=True).start()
    except BaseException as exc:  # no thread to wait with: the child must not go on
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(kill_wait)
        _close(proc)
        raise OSError(errno.EAGAIN, f"cannot wait for {argv[0]}: {exc}") from exc
    io = asyncio.gather(_read_all(loop, proc.stdout), _read_all(loop, proc.stderr),
                        _write_all(loop, proc.stdin, stdin))
    try:
        out, err, _ = await io
        await asyncio.shield(ended)
    except asyncio.CancelledError:
        _kill_group(proc)
        io.cancel()
        with contextlib.suppress(BaseException):
            await io
        _close(proc)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(kill_wait):
                await asyncio.shield(ended)
        if ended.done():
            proc.wait()
        raise
    return proc.wait(), out, err


def _wait_for_end(pid: int, loop: asyncio.AbstractEventLoop, ended: asyncio.Future[None]) -> None:
    """In the child's thread: wait until ``pid`` has ended, leave it unreaped, and tell
    the loop (or, the loop gone, reap it here)."""
    while True:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
        except ChildProcessError:  # reaped meanwhile (by the loop, after its end)
            break
    try:
        loop.call_soon_threadsafe(_settle, ended)
    except RuntimeError:  # the loop closed: nobody will reap it there
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (the child is unreaped: its pid, which is the
    group's id, is still its own)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _close(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


async def _read_all(loop: asyncio.AbstractEventLoop, pipe: IO[bytes] | None) -> bytes:
    assert pipe is not None
    reader = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        return await reader.read()
    finally:
        transport.close()


async def _write_all(loop: asyncio.AbstractEventLoop, pipe: IO[bytes] | None,
                     data: bytes | None) -> None:
    if pipe is None or data is None:
        return
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
    transport, _ = await loop.connect_write_pipe(lambda: protocol, pipe)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        writer.write(data)
        await writer.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child did not read it all: its answer says why
    finally:
        transport.close()
