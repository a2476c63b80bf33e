"""Retry delays: exponential backoff with jitter (AWS Architecture Blog, "Exponential
Backoff And Jitter"), one formula for the whole daemon.

* :func:`backoff_delay` — the delay before retry number N; the engine persists it per
  job (``next_attempt_at``) so that it survives a restart.
* :class:`Backoff` — the same delays for an in-process reconnect loop (MQTT publisher,
  Kubernetes list-then-watch, the Flux status stream, the TrainJob front door): each
  failure waits longer, up to ``cap``; a success resets it.

Written here rather than taken from a retry library (tenacity, backoff): the engine
persists its delay rather than wrapping a call, and the reconnect loops are long-lived
loops that reset on success (a watch that streamed for an hour and then broke retries
quickly), not calls to be retried.

The jitter is AWS's "equal jitter": a delay lies in ``[ceiling/2, ceiling]`` with
``ceiling = min(cap, base * 2**(attempt-1))``. Half of it is certain, so a loop against
something that is down never spins; the other half spreads reconnecting daemons apart.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

__all__ = ["Backoff", "backoff_delay"]

#: ``uniform(low, high)``: a random float in ``[low, high]``.
Uniform = Callable[[float, float], float]


def backoff_delay(attempt: int, base: float = 1.0, cap: float = 60.0,
                  uniform: Uniform = random.uniform) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): in
    ``[ceiling/2, ceiling]``, ``ceiling = min(cap, base * 2**(attempt-1))``."""
    ceiling = min(cap, base * 2.0 ** min(max(0, attempt - 1), 1023))
    return ceiling / 2 + uniform(0, ceiling / 2)


class Backoff:
    """The delays of one reconnect loop: call :meth:`sleep` (or :meth:`delay`) after
    each failure and :meth:`reset` after each success.

    The n-th delay since the last reset is ``backoff_delay(n, base, cap)``. ``uniform``
    and ``sleep`` are seams for tests (no real waiting, no randomness)."""

    def __init__(self, base: float, cap: float, *, uniform: Uniform = random.uniform,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        if not 0 < base <= cap:
            raise ValueError(f"backoff needs 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self.failures = 0
        self._uniform = uniform
        self._sleep = sleep

    def delay(self) -> float:
        """Count one more failure and return the seconds to wait before trying again."""
        self.failures += 1
        return backoff_delay(self.failures, self.base, self.cap, self._uniform)

    def reset(self) -> None:
        """A success: the next failure waits the shortest delay again."""
        self.failures = 0

    async def sleep(self) -> float:
        """Wait :meth:`delay` seconds; return how long."""
        seconds = self.delay()
        await self._sleep(seconds)
        return seconds
