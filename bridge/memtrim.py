"""Giving freed heap memory back to the system while the daemon idles.

A burst of work (thousands of submissions, a large listing) leaves glibc's heap holding
memory Python has freed: the daemon that admitted 10,000 jobs kept ~50 MB more than
the same daemon restarted over the same store (``bench/scale.py``). Two glibc calls
bring it back to 99 MB (docs/operations.md):

* :func:`limit_arenas`, at start before any worker thread: at most 2 malloc arenas
  (what ``MALLOC_ARENA_MAX=2`` does), unless the operator set ``MALLOC_ARENA_MAX`` or
  ``GLIBC_TUNABLES`` (theirs stands);
* :func:`trim_forever`: ``malloc_trim(0)`` every ``interval`` seconds in a worker
  thread, returning the free pages of the heap, and at once (at most one at a time)
  when code that has just dropped a large transient (a back end's whole job listing:
  tens of MB) calls :func:`trim_soon`, so that what the daemon holds between two
  periodic trims is not the peak of its last burst.

The C library is the one the process already loaded (``ctypes.CDLL(None)``: no
``ldconfig`` or compiler is run to find it). Where it lacks these functions (musl,
macOS) nothing happens; nothing here can stop the daemon. The standard library has no
binding for either call.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
from collections.abc import Callable

import structlog

__all__ = ["limit_arenas", "malloc_trim", "trim_forever", "trim_soon"]

log = structlog.get_logger("hpc_bridge.daemon")

#: glibc's mallopt parameter for the number of malloc arenas.
M_ARENA_MAX = -8


def _function(name: str, argtypes: list[type], restype: type) -> Callable[..., int] | None:
    """``name`` from the C library this process loaded, or None."""
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function  # type: ignore[no-any-return]


def limit_arenas(count: int) -> bool:
    """At most ``count`` glibc malloc arenas (call before threads start: each thread
    that allocates may otherwise get an arena of its own, and a worker thread's arena
    keeps what it once held); whether it was set (False: not glibc, or the operator's
    ``MALLOC_ARENA_MAX``/``GLIBC_TUNABLES`` stands)."""
    if "MALLOC_ARENA_MAX" in os.environ or "GLIBC_TUNABLES" in os.environ:
        return False
    mallopt = _function("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
    try:
        return mallopt is not None and bool(mallopt(M_ARENA_MAX, count))
    except Exception:  # never let this stop the daemon
        log.exception("mallopt failed")
        return False


def malloc_trim() -> bool:
    """``malloc_trim(0)`` where the C library has it; whether it gave memory back."""
    trim = _function("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    return trim is not None and bool(trim(0))


#: The loop :func:`trim_forever` runs on and the event :func:`trim_soon` sets, while it
#: runs (the last one started, should there be two).
_soon: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None


def trim_soon() -> None:
    """Ask the running :func:`trim_forever` for a trim now; nothing when none runs, or
    when called outside its loop (another loop, or a thread without one)."""
    if _soon is None:
        return
    loop, event = _soon
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if running is loop:
        event.set()


async def trim_forever(interval: float = 60.0) -> None:
    """Trim the heap every ``interval`` seconds, and when :func:`trim_soon` asks, until
    cancelled (at once when the C library has no ``malloc_trim``)."""
    global _soon
    if _function("malloc_trim", [ctypes.c_size_t], ctypes.c_int) is None:
        return
    soon = asyncio.Event()
    _soon = mine = (asyncio.get_running_loop(), soon)
    try:
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that
            # comes as the event is set.
            with contextlib.suppress(TimeoutError):  # the periodic trim
                async with asyncio.timeout(interval):
                    await soon.wait()
            soon.clear()
            try:
                await asyncio.to_thread(malloc_trim)
            except Exception:  # never let this stop the daemon
                log.exception("malloc_trim failed")
    finally:
        if _soon is mine:
            _soon = None
