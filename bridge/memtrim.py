"""Giving freed heap memory back to the system while the daemon idles.

A burst of work (thousands of submissions, a large listing) leaves glibc's heap holding
memory Python has freed: the daemon that admitted 10,000 jobs kept ~50 MB more than
the same daemon restarted over the same store (``bench/scale.py``). :func:`trim_forever`
calls glibc's ``malloc_trim(0)`` every ``interval`` seconds in a worker thread, which
returns the free pages at the top and inside the heap. Elsewhere than glibc (musl, a
platform without it) it does nothing. The standard library has no binding for it;
``ctypes`` calls the C library's own.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

import structlog

__all__ = ["limit_arenas", "malloc_trim", "trim_forever"]

log = structlog.get_logger("hpc_bridge.daemon")


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def _load(libc: ctypes.CDLL | None) -> Callable[[int], int] | None:
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_LIBC = _libc()
_TRIM = _load(_LIBC)
#: glibc's mallopt parameter for the number of malloc arenas.
_M_ARENA_MAX = -8


def limit_arenas(count: int) -> bool:
    """At most ``count`` glibc malloc arenas (call before threads start: each thread
    that allocates may otherwise get an arena of its own, and the worker threads'
    arenas keep what they once held); whether the C library took it."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, count))


def malloc_trim() -> bool:
    """``malloc_trim(0)`` where the C library has it; whether it gave memory back."""
    return bool(_TRIM(0)) if _TRIM is not None else False


async def trim_forever(interval: float = 60.0) -> None:
    """Trim the heap every ``interval`` seconds (cancel to stop)."""
    if _TRIM is None:
        return
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(malloc_trim)
        except Exception:  # never let this stop the daemon
            log.exception("malloc_trim failed")
