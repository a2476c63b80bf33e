"""Child processes on any event loop: CPython's own spawn, supervised by a thread.

Contract:

* :func:`communicate` starts ``argv`` with :class:`subprocess.Popen` and the keyword
  arguments given (``umask``, ``user``, ``group``, ``extra_groups``, ``pass_fds``,
  ``cwd``, ``env`` …: all that CPython's spawn takes; without ``user``/``group``/
  ``extra_groups`` CPython makes the child with ``vfork``, see :mod:`bridge.runas`),
  writes ``stdin`` (None: the child's standard input is ``/dev/null``), and returns
  ``(returncode, stdout, stderr)`` once the child has ended and both pipes are closed.
  The keywords that this function sets itself (the standard streams, ``text``,
  ``close_fds``, the session and process group) are refused with :class:`TypeError`.
* It is the same on every asyncio loop. The daemon runs on uvloop
  (:mod:`bridge.eventloop`), whose ``subprocess_exec`` takes none of ``umask``,
  ``user``, ``group``, ``extra_groups``, so the daemon's own commands are not started
  through the loop, and their pipes are never handed to it: the start is CPython's, in
  the caller's thread (as asyncio's own loop does it), and from then on one thread of
  the child's own does everything else — the pipes (``Popen.communicate``), any kill
  and the reaping — so no descriptor is closed twice and no kill can reach a reused
  pid (the thread that kills is the one that reaps).
* Each child starts a session of its own (so leads a process group that no process
  of the daemon's session can join). Cancelled (the caller's timeout, or its own
  cancellation), the supervisor kills the group and the child (SIGKILL), goes on
  reading until the pipes close or ``kill_wait`` seconds pass, then closes them itself
  (a descendant that left the group may hold them) and reaps the child; the call waits
  for that, ``kill_wait`` seconds at most, then lets the cancellation go on (a child
  that takes longer to die is still reaped by its supervisor).
* An :class:`OSError` of the start (no such program, not executable) is raised as is;
  a supervisor that cannot be started raises :class:`OSError` after the child was
  killed and, if it died within :data:`REAP_NOW`, reaped (else CPython reaps it later,
  at a later start of a child).
* What the child writes is kept whole in memory (``Popen.communicate``): the callers
  run commands whose output is small (Slurm's and Flux's) under a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["KILL_WAIT", "communicate", "start"]

#: Seconds a killed child is waited for before the cancellation goes on regardless.
KILL_WAIT = 5.0
#: How long a killed child without a supervisor is waited for in the loop's thread.
REAP_NOW = 0.05
#: How often a supervisor looks whether its call was cancelled (seconds).
POLL = 0.2

#: How a child is started (a test may wrap it to see the keyword arguments).
start = subprocess.Popen

_OWN_KEYWORDS = frozenset({"stdin", "stdout", "stderr", "text", "universal_newlines",
                           "encoding", "errors", "close_fds", "process_group",
                           "start_new_session", "preexec_fn"})

Result = tuple[int, bytes, bytes]


async def communicate(argv: Sequence[str], *, stdin: bytes | None = None,
                      kill_wait: float = KILL_WAIT, **popen: Any) -> Result:
    """``(returncode, stdout, stderr)`` of ``argv`` (see the module docstring)."""
    own = sorted(_OWN_KEYWORDS & popen.keys())
    if own:
        raise TypeError(f"communicate() sets {', '.join(own)} itself")
    proc = start(list(argv), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                 **popen)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Result] = loop.create_future()
    cancelled = threading.Event()

    def supervise() -> None:
        try:
            result: Result | None = _supervise(proc, stdin, cancelled, kill_wait)
            error: BaseException | None = None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(_settle, done, result, error)

    try:
        threading.Thread(target=supervise, name=f"child-{proc.pid}", daemon=True).start()
    except BaseException as exc:  # no supervisor: the child must not go on
        _kill(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):  # else CPython reaps it later
            proc.wait(REAP_NOW)
        raise OSError(errno.EAGAIN, f"cannot supervise {argv[0]}: {exc}") from exc
    try:
        return await asyncio.shield(done)
    except BaseException:
        cancelled.set()
        with contextlib.suppress(BaseException):  # a second cancel: stop waiting
            async with asyncio.timeout(kill_wait):
                await asyncio.shield(done)
        raise


def _settle(done: asyncio.Future[Result], result: Result | None,
            error: BaseException | None) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        assert result is not None
        done.set_result(result)


def _supervise(proc: subprocess.Popen[bytes], data: bytes | None, cancelled: threading.Event,
               kill_wait: float) -> Result:
    """In the child's thread: its pipes until they close and its end, or, once the call
    is cancelled, its kill (see the module docstring)."""
    killed_at: float | None = None
    while True:
        try:
            out, err = proc.communicate(data, timeout=POLL)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            data = None  # given once: communicate keeps what it did not write yet
        if not cancelled.is_set():
            continue
        now = time.monotonic()
        if killed_at is None:
            killed_at = now
            _kill(proc)
        elif now - killed_at >= kill_wait:  # something else holds the pipes
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            proc.wait()
            return proc.returncode, b"", b""


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group and the child itself (unreaped: its pid is
    still its own, as is the group's id)."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.pid, signal.SIGKILL)
