"""Leader election: among replicas of the daemon, one leads (serves and writes), the
others stand by (docs/operations.md, "Replicas and leader election").

An elector is built by an entry point of the ``hpc_bridge.leader_election`` group
(``(name, settings) -> Elector``; ``kubernetes``: a ``coordination.k8s.io`` Lease,
:mod:`k8s_adapter.lease`), configured as ``[leader_election]`` with ``kind = ...``, so
that ``bridge`` never imports an adapter.

The daemon's contract with it (:func:`bridge.daemon.run_daemon`):

1. Standby: only ``/v1/healthz`` on ``daemon.health`` answers (``ready: false, role:
   standby``); no store is open, no back end or front door runs, nothing is written.
2. :meth:`Elector.acquire` returns: this replica leads. Replicas share nothing but the
   apiserver and the back ends, so the leader starts from an empty store and rebuilds
   it from the TrainJob CRs (the front door) and the back ends (the engine's lookup
   before any submit of a job the CR says was taken already): no job is run twice.
3. :meth:`Elector.hold` returns (or raises) when the lease is lost or cannot be
   renewed in time: the daemon ends the process at once (exit status 3), without the
   graceful shutdown, which would write; the orchestrator restarts it as a standby.
   A fence thread (:func:`start_fence`) does the same from outside the event loop once
   :meth:`Elector.valid_until` has passed, so a blocked loop cannot keep writing on a
   lease that has run out.
4. A clean stop (SIGTERM, a rolling update) ends serving first, then
   :meth:`Elector.release` gives the lease up so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import structlog

from bridge.backend import load_plugin

log = structlog.get_logger(__name__)

ENTRY_POINT_GROUP = "hpc_bridge.leader_election"
#: Exit status of a daemon that lost its lease.
EXIT_LOST_LEASE = 3


@runtime_checkable
class Elector(Protocol):
    identity: str

    async def acquire(self) -> None:
        """Return once this replica holds the lease (waits, retrying, while another
        does; the world being down is retried, never raised)."""

    def valid_until(self) -> float:
        """``time.monotonic()`` until which the lease is certainly held (the last
        renewal plus the renew deadline); 0 when not held."""

    async def hold(self) -> None:
        """Keep renewing; return (or raise) only when the lease is lost."""

    async def release(self) -> None:
        """Give the lease up if held (best effort) and close connections."""


def load_elector(kind: str, settings: dict[str, Any]) -> Elector:
    """Build the elector registered as ``kind``; ValueError as for back ends."""
    elector = load_plugin(ENTRY_POINT_GROUP, "leader-election", kind, "leader_election",
                          settings)
    if not isinstance(elector, Elector):
        raise ValueError(f"entry point {kind!r} did not build an Elector")
    return elector


def lost_lease(why: str) -> None:
    """End the process now: a replica without the lease must not write another byte."""
    log.critical("leader election: %s; exiting (status %d) without cleanup",
                 why, EXIT_LOST_LEASE)
    logging.shutdown()
    os._exit(EXIT_LOST_LEASE)


def start_fence(elector: Elector, interval: float = 0.1) -> threading.Event:
    """A daemon thread that ends the process once ``elector.valid_until()`` passes;
    set the returned event before releasing the lease on purpose."""
    stopped = threading.Event()

    def watch() -> None:
        while not stopped.wait(interval):
            if time.monotonic() > elector.valid_until() and not stopped.is_set():
                lost_lease("the lease was not renewed within the renew deadline")

    threading.Thread(target=watch, name="leader-fence", daemon=True).start()
    return stopped


async def stand_by(elector: Elector, stop: asyncio.Event) -> bool:
    """Wait until this replica leads (True) or ``stop`` is set first (False)."""
    acquire = asyncio.create_task(elector.acquire(), name="leader-acquire")
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for task in (acquire, stopped):
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
    return acquire.done() and not acquire.cancelled() and acquire.exception() is None


def reset_store(path: Path) -> None:
    """Remove the SQLite store at ``path`` (and its WAL files): a new leader rebuilds
    it from the world (see the module docstring)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
