"""Per-user limits: one user's share of a daemon that serves every user of a cluster.

:class:`UserLimits` holds the three limits an admin sets in ``[limits]``
(:class:`bridge.config.LimitsSection`):

* **active jobs**: unfinished jobs per user (the caller counts them in the store, up
  to :meth:`UserLimits.active_cap`, and asks :meth:`UserLimits.check_active` right
  before admitting, with no ``await`` in between, so two submissions cannot both take
  the last place; where the limit does not apply nothing is counted);
* **submission rate**: a token bucket per user (``submit_rate`` per second after a burst
  of ``submit_burst``), :meth:`UserLimits.check_submit`;
* **requests**: a token bucket per user for all requests (``request_rate`` per second
  after ``request_burst``; :meth:`UserLimits.check_request`), and at most
  ``max_concurrent_requests`` in progress (:meth:`UserLimits.enter` /
  :meth:`UserLimits.leave` around a request). Both matter: requests served quickly
  one after another are never many at once, yet can keep the loop busy.

Each refusal raises :class:`LimitExceeded` (the API answers 429 with ``Retry-After``
and its message, which names the setting) and is counted in :attr:`UserLimits.hits`
(the daemon logs the counts; metrics come later). root (uid 0) is exempt.

The token bucket is written here rather than taken from a rate-limit package: it is
a dozen lines, it must say exactly when the next token comes (``Retry-After``), take an
injected clock (tests run on fake time), and forget idle users so that many users
cost no memory. Everything here runs on the event loop thread; nothing locks.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from bridge.errors import BridgeError

__all__ = ["LimitExceeded", "LimitSettings", "TokenBuckets", "UserLimits"]

#: Seconds a client is told to wait when its user has too many unfinished jobs
#: (nobody knows when one will finish; this is how often it is worth asking again).
ACTIVE_JOBS_RETRY_AFTER = 30
#: Seconds a client is told to wait when its user has too many requests in flight.
CONCURRENCY_RETRY_AFTER = 1


class LimitExceeded(BridgeError):
    """A request refused by a per-user limit: ``limit`` names it, ``retry_after`` is
    the whole number of seconds (at least 1) after which asking again may succeed."""

    def __init__(self, limit: str, message: str, retry_after: int):
        super().__init__(message)
        self.limit = limit
        self.retry_after = max(1, retry_after)


@dataclass(frozen=True)
class LimitSettings:
    """The per-user limits (0 turns one off); see :class:`bridge.config.LimitsSection`."""

    max_active_jobs: int = 5000
    submit_rate: float = 20.0
    submit_burst: int = 200
    max_concurrent_requests: int = 32
    request_rate: float = 50.0
    request_burst: int = 200
    #: Seconds between the log lines that count refusals.
    log_interval: float = 60.0
    #: Largest request body and batch script (for everyone, root too).
    max_request_bytes: int = 8 * 1024 * 1024
    max_script_bytes: int = 4 * 1024 * 1024


class TokenBuckets:
    """One token bucket per key: ``rate`` tokens per second, at most ``burst`` held.

    :meth:`take` takes one token and returns 0.0, or takes none and returns the seconds
    until one will be there. A key whose bucket has filled up again is forgotten (a
    full bucket and no bucket behave the same), so idle users cost nothing.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 4096):
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._max_keys = max_keys
        #: key -> (tokens, when they were counted)
        self._buckets: dict[object, tuple[float, float]] = {}

    def tokens(self, key: object) -> float:
        """Tokens ``key`` holds now."""
        now = self._clock()
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.rate)

    def take(self, key: object) -> float:
        """Take a token for ``key``: 0.0 when taken, else seconds until one is there."""
        now = self._clock()
        tokens = self.tokens(key)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > self._max_keys:
                self._forget_full(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        for key, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * self.rate >= self.burst:
                del self._buckets[key]


class UserLimits:
    """The per-user limits of one daemon, keyed by unix uid; uid 0 is exempt."""

    def __init__(self, settings: LimitSettings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._buckets = (TokenBuckets(settings.submit_rate, settings.submit_burst, clock)
                         if settings.submit_rate > 0 else None)
        self._requests = (TokenBuckets(settings.request_rate, settings.request_burst, clock)
                          if settings.request_rate > 0 else None)
        self._in_flight: Counter[int] = Counter()
        #: (user name, limit) -> refusals since the counts were last taken.
        self.hits: Counter[tuple[str, str]] = Counter()
        #: Refusals since the daemon started.
        self.total_hits = 0

    def _refuse(self, user: str, limit: str, message: str, retry_after: int) -> LimitExceeded:
        self.hits[(user, limit)] += 1
        self.total_hits += 1
        return LimitExceeded(limit, message, retry_after)

    def enter(self, uid: int, user: str) -> None:
        """Count a request of ``uid`` in; raise :class:`LimitExceeded` when it already has
        ``max_concurrent_requests`` in progress. Pair every successful call with
        :meth:`leave`."""
        limit = self.settings.max_concurrent_requests
        if uid == 0 or limit <= 0:
            return
        if self._in_flight[uid] >= limit:
            raise self._refuse(
                user, "max_concurrent_requests",
                f"too many requests at once: {user} has {limit} in progress, the most one "
                f"user may (limits.max_concurrent_requests = {limit}); try again shortly",
                CONCURRENCY_RETRY_AFTER)
        self._in_flight[uid] += 1

    def leave(self, uid: int) -> None:
        """Count a request of ``uid`` out (after a successful :meth:`enter`)."""
        if uid == 0 or self.settings.max_concurrent_requests <= 0:
            return
        self._in_flight[uid] -= 1
        if self._in_flight[uid] <= 0:
            del self._in_flight[uid]

    def in_flight(self, uid: int) -> int:
        """Requests of ``uid`` in progress (as counted by :meth:`enter`)."""
        return self._in_flight[uid]

    def check_request(self, uid: int, user: str) -> None:
        """Take one request from ``uid``'s request rate; raise :class:`LimitExceeded`
        when its bucket is empty."""
        if uid == 0 or self._requests is None:
            return
        wait = self._requests.take(uid)
        if wait > 0:
            s = self.settings
            raise self._refuse(
                user, "request_rate",
                f"too many requests: {user} may make {s.request_rate:g} per second after a "
                f"burst of {s.request_burst} (limits.request_rate, limits.request_burst); "
                f"try again in {wait:.1f} s", math.ceil(wait))

    def check_submit(self, uid: int, user: str) -> None:
        """Take one submission from ``uid``'s rate; raise :class:`LimitExceeded` when
        its bucket is empty (``Retry-After``: when the next token comes)."""
        if uid == 0 or self._buckets is None:
            return
        wait = self._buckets.take(uid)
        if wait > 0:
            s = self.settings
            raise self._refuse(
                user, "submit_rate",
                f"too many submissions: {user} may submit {s.submit_rate:g} jobs per second "
                f"after a burst of {s.submit_burst} (limits.submit_rate, "
                f"limits.submit_burst); try again in {wait:.1f} s",
                math.ceil(wait))

    def active_cap(self, uid: int) -> int | None:
        """How far the caller must count ``uid``'s unfinished jobs for
        :meth:`check_active` to decide (``max_active_jobs + 1``: a count past the limit
        need not be exact), or None when the limit does not apply to ``uid`` (root, or
        the limit off): then nothing need be counted. The count costs the store one
        index entry per job counted, so a user with many jobs costs no more than the
        limit."""
        limit = self.settings.max_active_jobs
        return None if uid == 0 or limit <= 0 else limit + 1

    def check_active(self, uid: int, user: str, active: int, adding: int = 1) -> None:
        """Refuse ``adding`` new jobs (the tasks of an array) when ``uid`` already has
        ``active`` unfinished ones (a count that may stop at :meth:`active_cap`) and the
        sum would pass the most allowed (``max_active_jobs``)."""
        limit = self.settings.max_active_jobs
        if uid == 0 or limit <= 0 or active + adding <= limit:
            return
        has = f"more than {limit}" if active > limit else str(active)
        what = f"an array of {adding} tasks would make {active + adding}, more than" if (
            adding > 1 and active <= limit) else f"{user} has {has},"
        raise self._refuse(
            user, "max_active_jobs",
            f"too many unfinished jobs: {what} the most one user may have "
            f"(limits.max_active_jobs = {limit}); wait for some to finish or cancel some",
            ACTIVE_JOBS_RETRY_AFTER)

    def take_hits(self) -> dict[str, dict[str, int]]:
        """The refusals counted since the last call, as ``{user: {limit: count}}``, and
        start counting afresh."""
        counts: dict[str, dict[str, int]] = {}
        for (user, limit), n in sorted(self.hits.items()):
            counts.setdefault(user, {})[limit] = n
        self.hits.clear()
        return counts
