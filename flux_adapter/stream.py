"""The Flux back end's status stream: :meth:`flux_adapter.backend.FluxBackend.watch`.

One ``job-manager.events-journal`` stream (RFC 21) carries every event of every job of
the instance; it runs on a thread of its own with its own Flux handle (a handle is not
thread-safe) and hands each response to the event loop through a queue. The journal
starts with the backlog of active jobs, then an end-of-backlog sentinel, then events in
real time. Once the backlog is in, the stream yields

* one complete snapshot (``StatusBatch(complete=True)``, from the back end's
  ``snapshot`` callable: one ``job-list`` query merged with the :class:`JobTable`);
* then, per batch of journal responses, the bridge's jobs they changed
  (``complete=False``);
* and another complete snapshot every ``reconcile_interval`` seconds (sooner again
  after a failed one), so jobs that finished while the daemon was down, or were
  purged, are seen too.

Without the instance owner's role (``EPERM``) the journal is refused; the stream then
polls one snapshot per ``interval``, the Slurm model, and says so once. When Flux cannot
be reached :meth:`StatusStream.watch` yields nothing, never raises, and connects again
with exponential backoff (:class:`bridge.backoff.Backoff`) from :data:`RECONNECT_BASE`
up to :data:`RECONNECT_CAP` seconds, starting again after each batch it yields.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import structlog

from bridge.backend import BackendError, BackendUnavailable, StatusBatch
from bridge.backoff import Backoff
from bridge.errors import BridgeError
from flux_adapter.client import FluxConnection, classify
from flux_adapter.jobtable import JobTable

__all__ = ["RECONNECT_BASE", "RECONNECT_CAP", "StatusStream"]

log = structlog.get_logger(__name__)

#: First and longest wait (seconds) between two attempts to reach a lost broker again.
RECONNECT_BASE = 0.5
RECONNECT_CAP = 10.0


class _JournalRefused(BridgeError):
    """The journal needs the instance owner's role."""


Session = tuple[threading.Event, "asyncio.Queue[tuple[str, Any]]"]


class StatusStream:
    """The status stream of the Flux back end ``name``: ``connect`` opens a Flux handle
    for the journal thread, ``table`` tracks the jobs, ``snapshot`` makes a complete
    snapshot, ``warn_once`` reports a condition the operator should see once."""

    def __init__(self, name: str, connect: Callable[[], FluxConnection], table: JobTable,
                 snapshot: Callable[[], Awaitable[StatusBatch]], reconcile_interval: float,
                 warn_once: Callable[[str], None]) -> None:
        self.name = name
        self._connect = connect
        self._table = table
        self._snapshot = snapshot
        self.reconcile_interval = reconcile_interval
        self._warn_once = warn_once
        self._sessions: set[Session] = set()
        self._closed = False

    def close(self) -> None:
        """End every journal session and every :meth:`watch` (idempotent)."""
        self._closed = True
        for stop, queue in list(self._sessions):
            stop.set()
            queue.put_nowait(("closed", None))

    async def watch(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        """Event batches from the journal (``complete=False``) and a full snapshot
        every ``reconcile_interval`` s (``complete=True``); without the owner's role, a
        snapshot every ``interval`` s. Never raises: while Flux cannot be reached
        nothing is yielded, and it reconnects with backoff."""
        backoff = Backoff(RECONNECT_BASE, RECONNECT_CAP)
        polling = False
        while not self._closed:
            try:
                source = self._poll(interval) if polling else self._journal(interval)
                async with aclosing(source) as stream:
                    async for batch in stream:
                        yield batch
                        backoff.reset()
            except _JournalRefused as exc:
                self._warn_once(f"the event journal needs the instance owner's role "
                                f"({exc}); polling job-list every {interval:g}s instead")
                polling = True
                continue
            except BackendError as exc:
                self._warn_once(f"no status for now: {exc}")
            except Exception:
                log.exception("flux back end %s: unexpected error in the status stream",
                              self.name, backend=self.name)
            if self._closed:
                return
            await backoff.sleep()

    async def _try_snapshot(self) -> StatusBatch | None:
        try:
            return await self._snapshot()
        except BackendError as exc:
            self._warn_once(f"job-list snapshot failed (events still flow): {exc}")
            return None

    async def _poll(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        while True:
            yield await self._snapshot()
            await asyncio.sleep(interval)

    def _journal_thread(self, loop: asyncio.AbstractEventLoop,
                        queue: asyncio.Queue[tuple[str, Any]], stop: threading.Event) -> None:
        def put(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: the daemon is exiting
                stop.set()

        conn: FluxConnection | None = None
        try:
            conn = self._connect()
            for resp in conn.journal(stop):
                put(("event", resp))
                if stop.is_set():
                    return
            if not stop.is_set():
                put(("end", None))
        except BaseException as exc:  # handed to the event loop
            put(("error", exc))
        finally:
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    log.debug("closing the journal handle failed", exc_info=True)

    async def _journal(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()
        thread = threading.Thread(target=self._journal_thread, args=(loop, queue, stop),
                                  name=f"flux-{self.name}-journal", daemon=True)
        thread.start()
        session = (stop, queue)
        self._sessions.add(session)
        self._table.restart_journal()
        caught_up = False
        next_snapshot = 0.0
        try:
            while True:
                timeout = None if not caught_up else max(0.0, next_snapshot - loop.time())
                try:
                    async with asyncio.timeout(timeout):
                        item = await queue.get()
                except TimeoutError:
                    snapshot = await self._try_snapshot()
                    if snapshot is not None:
                        yield snapshot
                    next_snapshot = loop.time() + (self.reconcile_interval if snapshot
                                                   else min(interval, self.reconcile_interval))
                    continue
                changed: set[int] = set()
                sentinel = False
                while True:
                    kind, payload = item
                    if kind == "closed":
                        return
                    if kind == "error":
                        if isinstance(payload, OSError) and payload.errno == errno.EPERM:
                            raise _JournalRefused(payload.strerror or str(payload))
                        raise classify(payload, "flux event journal")
                    if kind == "end":
                        raise BackendUnavailable("the Flux event journal ended (broker or "
                                                 "job-manager restarted?)")
                    result = self._table.apply(payload)
                    if result is None:
                        sentinel = True
                    elif result >= 0:
                        changed.add(result)
                    if queue.empty():
                        break
                    item = queue.get_nowait()
                if sentinel and not caught_up:
                    caught_up = True
                    snapshot = await self._try_snapshot()
                    next_snapshot = loop.time() + (self.reconcile_interval if snapshot
                                                   else min(interval, self.reconcile_interval))
                    if snapshot is not None:
                        yield snapshot  # it holds every tracked job, changed or not
                        continue
                jobs = self._table.changed(sorted(changed))
                if caught_up and jobs:
                    yield StatusBatch(jobs=jobs, complete=False, at=time.time())
        finally:
            stop.set()
            self._sessions.discard(session)
