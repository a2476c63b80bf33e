"""The outbox as a change feed: who waits for new job events is woken when one is written.

Every state change writes an outbox row (:mod:`bridge.store`) from wherever it happens
(engine, API, front doors). :class:`EventFeed` notices new rows with one query of the
newest sequence number per ``interval`` (SQLite's ``max(rowid)``: a B-tree's last entry,
microseconds) and wakes every waiter: the MQTT publisher and ``GET /v1/events``
long-polls. New rows are handed to the observers (metrics) in order, once each.

Contract: :meth:`EventFeed.wait_after` returns as soon as the feed has seen an event
newer than ``seq`` (at most about one ``interval`` after it was committed) or when its
timeout passes; it never misses one, because it compares sequence numbers rather
than catching a notification.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import suppress

import structlog

from bridge.outbox import Event
from bridge.store import Store

log = structlog.get_logger("hpc_bridge.feed")

Observer = Callable[[Sequence[Event]], None]


class EventFeed:
    """Watches ``store``'s outbox; run :meth:`run` as a task."""

    def __init__(self, store: Store, interval: float = 0.02,
                 observers: Sequence[Observer] = ()) -> None:
        self.store = store
        self.interval = interval
        self.last_id = store.last_event_id()
        self._observers = list(observers)
        #: Set, and replaced by a new one, at each change. No lock: a waiter cancelled
        #: at any point holds nothing (asyncio.Condition must take its lock again when
        #: a waiter is cancelled, and a cancelled shutdown was seen to hang there).
        self._changed = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # e.g. a busy database: look again next time
                log.exception("reading the outbox failed")
            await asyncio.sleep(self.interval)

    async def check(self) -> None:
        """Look at the outbox once; wake waiters if something new is there."""
        newest = self.store.last_event_id()
        if newest <= self.last_id:
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
            with suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)
        return self.last_id > seq
