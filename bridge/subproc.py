"""Child processes on any event loop: CPython's own spawn, waited on in a thread.

Contract:

* :func:`communicate` starts ``argv`` with :class:`subprocess.Popen` and the keyword
  arguments given (``umask``, ``user``, ``group``, ``extra_groups``, ``pass_fds``,
  ``cwd``, ``env`` …: all that CPython's spawn takes; without ``user``/``group``/
  ``extra_groups`` CPython makes the child with ``vfork``, see :mod:`bridge.runas`),
  writes ``stdin`` (None: the child's standard input is ``/dev/null``), and returns
  ``(returncode, stdout, stderr)`` once the child has ended.
* It is the same on every asyncio loop. The daemon runs on uvloop
  (:mod:`bridge.eventloop`), whose ``subprocess_exec`` takes none of ``umask``,
  ``user``, ``group``, ``extra_groups`` and spawns through libuv: so children are not
  started through the loop at all. The start is CPython's, in the caller's thread (as
  asyncio's own loop does it); the waiting (``Popen.communicate``) is in a thread of
  the child's own, which is what Python 3.11's asyncio does anyway (its default
  ``ThreadedChildWatcher`` waits for each child in a thread).
* An :class:`OSError` of the start (no such program, not executable) is raised as is.
* Cancelled (the caller's timeout, or its own cancellation), the child is killed
  (SIGKILL) and its end awaited for ``kill_wait`` seconds at most, then the
  cancellation goes on: a child never outlives the call that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["KILL_WAIT", "communicate", "start"]

#: Seconds a killed child is waited for before the cancellation goes on regardless.
KILL_WAIT = 5.0

#: How a child is started (a test may wrap it to see the keyword arguments).
start = subprocess.Popen


def _settle(done: asyncio.Future[tuple[bytes, bytes]], result: tuple[bytes, bytes] | None,
            error: BaseException | None) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        assert result is not None
        done.set_result(result)


async def communicate(argv: Sequence[str], *, stdin: bytes | None = None,
                      kill_wait: float = KILL_WAIT, **popen: Any) -> tuple[int, bytes, bytes]:
    """``(returncode, stdout, stderr)`` of ``argv`` (see the module docstring)."""
    proc = start(list(argv), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[bytes, bytes]] = loop.create_future()

    def wait() -> None:
        try:
            result: tuple[bytes, bytes] | None = proc.communicate(stdin)
            error: BaseException | None = None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(_settle, done, result, error)

    threading.Thread(target=wait, name=f"child-{proc.pid}", daemon=True).start()
    try:
        out, err = await asyncio.shield(done)
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(TimeoutError, Exception):
            async with asyncio.timeout(kill_wait):
                await asyncio.shield(done)
        raise
    assert proc.returncode is not None
    return proc.returncode, out, err
