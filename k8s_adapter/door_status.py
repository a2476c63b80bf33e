"""The TrainJob front door's status write-back (item 6 of k8s_adapter/frontdoor.py).

:class:`StatusWriteBack` is mixed into :class:`k8s_adapter.frontdoor.TrainJobFrontDoor`:
it writes each of the door's TrainJobs' status (``/status``, merge patch:
:mod:`k8s_adapter.status`) when its job changed, and records the Event that goes with
it first (:mod:`k8s_adapter.event_recorder`). Contract of :meth:`StatusWriteBack._status_loop`
in its docstring; a status equal to the one last written (or read) is not written again.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import structlog

from bridge.backend import BackendRejected, BackendUnavailable
from bridge.service import JobNotFound, JobRecord
from bridge.states import LIVE
from k8s_adapter.status import desired_status, same_status
from k8s_adapter.trainjobs import ref as _ref

if TYPE_CHECKING:
    from bridge.service import JobService
    from k8s_adapter.event_recorder import EventRecorder
    from k8s_adapter.frontdoor import FrontDoorSettings
    from k8s_adapter.kueue_workloads import KueueWorkloads
    from k8s_adapter.trainjobs import TrainJobCalls

__all__ = ["ORIGIN", "STATUS_BATCH", "StatusWriteBack"]

log = structlog.get_logger("k8s_adapter.frontdoor")

ORIGIN = "kubernetes"
#: Events of the change feed the status loop reads at once.
STATUS_BATCH = 1000


class StatusWriteBack(ABC):
    """The status half of the TrainJob door (see the module docstring): the door
    provides the attributes below and :meth:`_retry_due`."""

    calls: TrainJobCalls
    events: EventRecorder
    kueue: KueueWorkloads
    _service: JobService | None
    #: uid -> the last TrainJob object seen (the door's only).
    _objects: dict[str, dict[str, Any]]
    #: uid -> the status last written (or read), to write only changes.
    _written: dict[str, dict[str, Any]]
    #: TrainJobs to sync in the next round.
    _dirty: set[str]
    _wake: asyncio.Event

    settings: FrontDoorSettings

    @abstractmethod
    async def _retry_due(self) -> None:
        """Handle again the TrainJobs whose last handling failed (the door's)."""

    async def _status_loop(self) -> None:
        """Write the status of each TrainJob whose job changed: on every event of the
        service's change feed (from its cursor at start), every change within a state
        (:meth:`JobService.updates`) and every TrainJob of the door's dirty set (what
        the watch delivered, or whose ``jobsStatus`` the back end says changed: a
        JobSet's pods becoming ready change no state). Every TrainJob known at start is
        synced once, and the watch's first listing marks each dirty: after a restart
        (or a crash) each status converges. A failed write is tried again
        ``status_interval`` later."""
        assert self._service is not None
        service = self._service
        cursor = service.cursor()
        updates = service.updates(self._wake)
        stop_reports: Callable[[], None] | None = None
        try:
            stop_reports = service.on_jobs_status(self._jobs_status_changed)
            self._dirty.update(self._objects)
            self.events.seed(service.list_jobs(list(LIVE), origin=ORIGIN).items, time.time())
            while True:
                self._wake.clear()
                await self._retry_due()
                events, cursor = service.changes(cursor, STATUS_BATCH)
                await self._sync_all(self._changed({e.job_id for e in events} | updates.take()))
                if len(events) < STATUS_BATCH:  # else more are there already
                    await self._wait(cursor)
        finally:
            service.stop_updates(updates)
            if stop_reports is not None:
                stop_reports()

    def _jobs_status_changed(self, uid: str) -> None:
        """The back end's ``jobsStatus`` of job ``uid`` may have changed: sync its
        TrainJob (one of this door's) in the next round."""
        if uid in self._objects:
            self._dirty.add(uid)
            self._wake.set()

    def _changed(self, job_ids: Iterable[int]) -> dict[str, JobRecord]:
        """The records of the door's TrainJobs among ``job_ids`` and the dirty set (which
        is emptied), by uid."""
        assert self._service is not None
        records: dict[str, JobRecord] = {}
        for job_id in sorted(job_ids):
            try:
                rec = self._service.get(job_id)
            except JobNotFound:
                continue
            if rec.origin == ORIGIN and rec.uid in self._objects:
                records[rec.uid] = rec
        for uid in sorted(self._dirty - set(records)):
            found = self._service.get_by_uid(uid)
            if found is not None and found.origin == ORIGIN:
                records[uid] = found
        self._dirty.clear()
        return records

    async def _sync_all(self, records: dict[str, JobRecord]) -> None:
        for uid, rec in records.items():
            obj = self._objects.get(uid)
            if obj is None:
                continue
            try:
                await self._sync(obj, rec)
            except (BackendUnavailable, BackendRejected) as exc:
                log.warning("TrainJob %s: status not written: %s", _ref(obj), exc)
                self._dirty.add(uid)
            except Exception:
                log.exception("TrainJob %s: status write failed", _ref(obj))

    async def _wait(self, cursor: int) -> None:
        """Until an event after ``cursor``, the door's wake (a TrainJob handled, a job
        changed within its state) or ``status_interval`` seconds, whichever is first."""
        assert self._service is not None
        if self._wake.is_set():
            return
        timeout = self.settings.status_interval
        waits = {asyncio.ensure_future(self._service.wait_for_changes(cursor, timeout)),
                 asyncio.ensure_future(self._wake.wait())}
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _sync(self, obj: dict[str, Any], rec: JobRecord) -> None:
        uid = rec.uid
        meta = obj.get("metadata") or {}
        previous = self._written.get(uid) or obj.get("status")
        assert self._service is not None
        status = desired_status(rec, self._service.jobs_status(rec), previous,
                                self._service.trainer_statuses([rec.id]).get(rec.id),
                                self.kueue.hold(uid, str(meta.get("namespace"))))
        # The event first: a reader who sees a condition finds the event that goes with it.
        await self.events.record(self.calls, obj, rec)
        if not same_status(status, previous) and not same_status(status, obj.get("status")):
            await self.calls.patch_status(obj, status)
            self._written[uid] = status
        if meta.get("deletionTimestamp") and rec.state.terminal:
            await self.calls.remove_finalizer(obj)
