"""The outbox as a change feed: who waits for new job events is woken when one is written.

Every state change writes an outbox row (:mod:`bridge.store`) from wherever it happens
(engine, API, front doors), in a transaction; the store tells its commit listeners after
each commit it makes (in ``Store._tx``). :class:`EventFeed` is one while it runs: at once
(at most one look per
:data:`MIN_GAP`, 10 ms, during a burst of commits) it looks at the
newest sequence number (SQLite's ``max(rowid)``: a B-tree's last entry, microseconds)
and wakes every waiter: the MQTT publisher and ``GET /v1/events`` long-polls. New rows
are handed to the observers (metrics) in order, once each. Without commits it looks
only every ``interval`` seconds (a safety net), and reads nothing unless the store's
write count moved since its last look: an idle daemon is not woken 50 times a second,
nor takes SQLite's file locks, as a 20 ms poll did.

Contract: :meth:`EventFeed.wait_after` returns as soon as the feed has seen an event
newer than ``seq`` (within :data:`MIN_GAP` of its commit, at most about one
``interval``) or when its timeout passes; it never misses one, because it compares
sequence numbers rather than catching a notification.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress

import structlog

from bridge.outbox import Event
from bridge.store import Store

log = structlog.get_logger("hpc_bridge.feed")

Observer = Callable[[Sequence[Event]], None]

#: Seconds between two looks at the least, however often commits poke the feed.
MIN_GAP = 0.01


class EventFeed:
    """Watches ``store``'s outbox; run :meth:`run` as a task."""

    def __init__(self, store: Store, interval: float = 1.0,
                 observers: Sequence[Observer] = ()) -> None:
        self.store = store
        #: Seconds between looks when no commit pokes the feed (a safety net: every
        #: outbox row is written in a transaction, and each commit pokes it).
        self.interval = interval
        #: Set by a commit while :meth:`run` runs (made there, on its loop).
        self._poked: asyncio.Event | None = None
        #: The running feed's thread and loop (None while not running).
        self._thread = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.last_id = store.last_event_id()
        #: The store's write count at the last look (None: not looked yet).
        self._written: int | None = None
        self._observers = list(observers)
        #: Set, and replaced by a new one, at each change. No lock: a waiter cancelled
        #: at any point holds nothing (asyncio.Condition must take its lock again when
        #: a waiter is cancelled, and a cancelled shutdown was seen to hang there).
        self._changed = asyncio.Event()

    def _poke(self) -> None:
        """A commit: look again at once. The store is used by one thread at a time
        (bridge/store.py); a commit made off the loop's thread still pokes it safely."""
        loop, poked = self._loop, self._poked
        if loop is None or poked is None:  # not running: run() looks when it starts
            return
        if threading.get_ident() == self._thread:
            poked.set()
        else:
            with suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(poked.set)

    async def run(self) -> None:
        """Look at each commit (see the module docstring) until cancelled; the feed
        is a commit listener of its store only while this runs."""
        poked = self._poked = asyncio.Event()
        self._thread = threading.get_ident()
        loop = self._loop = asyncio.get_running_loop()
        self.store.commit_listeners.append(self._poke)
        try:
            while True:
                poked.clear()  # before the look: a commit during it looks again
                looked = loop.time()
                try:
                    await self.check()
                except Exception:  # e.g. a busy database: look again next time
                    log.exception("reading the outbox failed")
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancel that comes as the event is set, and the feed would never stop.
                with suppress(TimeoutError):
                    async with asyncio.timeout(self.interval):
                        await poked.wait()
                # Commits in a burst: one look per MIN_GAP at most, not one per commit.
                await asyncio.sleep(max(0.0, looked + MIN_GAP - loop.time()))
        finally:
            self.store.commit_listeners.remove(self._poke)
            self._loop = self._poked = None

    async def check(self) -> None:
        """Look at the outbox once; wake waiters if something new is there. Nothing
        was written since the last look when the store's write count is the same (the
        daemon is its only writer): then not even the outbox is read."""
        written = self.store.write_count  # before the read: a write after it is seen next
        if written == self._written:
            return
        newest = self.store.last_event_id()
        if newest <= self.last_id:
            self._written = written
            return
        if self._observers:
            seen = self.last_id
            while seen < newest:
                rows = self.store.events_after(seen, 1000, upto=newest)
                if not rows:
                    break
                for observer in self._observers:
                    try:
                        observer(rows)
                    except Exception:  # an observer's bug must not stop the feed
                        log.exception("event observer failed")
                seen = rows[-1].id
        self.last_id = newest
        self._written = written  # only now: a look that failed is made again
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_after(self, seq: int, seconds: float) -> bool:
        """Wait until an event newer than ``seq`` exists (True) or ``seconds`` passed
        (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.last_id <= seq:
            left = deadline - loop.time()
            if left <= 0:
                break
            changed = self._changed  # read with last_id, no await between: no miss
            with suppress(TimeoutError):  # not wait_for: 3.11's can swallow a cancel
                async with asyncio.timeout(left):
                    await changed.wait()
        return self.last_id > seq
