"""What the engine does with a back end's status reports: :class:`StatusTracker`.

Contract: :meth:`StatusTracker.apply` moves the stored jobs of one back end according to
one :class:`~bridge.backend.StatusBatch`. Only a back-end job whose key AND owner are
the stored job's counts (:mod:`bridge.ownership`; a foreign one is ignored and logged).
A complete snapshot is compared with what was applied last, by key: a job whose record
(``updated_at``) and reports are the same as when it last changed nothing is not read
again, so an idle cluster costs next to nothing per poll however many jobs it holds; a
job missing from ``lost_after_snapshots`` snapshots over ``lost_after_seconds`` fails
``BackendLost``, or, if its cancel was asked for, is ``Cancelled`` after
``lost_after_snapshots`` (a native array's pending task cancelled alone leaves no record
in Slurm). A snapshot made of the very job objects of the last one, whose
application wrote nothing and found every tracked job, is not compared again while
nothing is written to the store (a poll of an unchanged cluster costs a pass over object
identities). A report about a job whose submission is not recorded yet (a watch can be
faster than the submit call) is kept in :attr:`StatusTracker.early` for the engine to
apply once it is. Everything kept per job is dropped when the job finishes.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Iterator

import structlog

from bridge.backend import Backend, BackendJob, StatusBatch
from bridge.backoff import Backoff
from bridge.engine_settings import EngineSettings
from bridge.outcome import outcome
from bridge.ownership import OwnerCheck
from bridge.states import JobState
from bridge.store import JobRecord, Store

__all__ = ["EARLY_STATUS_LIMIT", "WATCH_HEALTHY_SECONDS", "StatusTracker", "follow_status"]

log = structlog.get_logger("hpc_bridge.engine")

#: At most this many statuses of not-yet-recorded submissions are kept.
EARLY_STATUS_LIMIT = 10_000
_ACTIVE = (JobState.SUBMITTED, JobState.RUNNING)
#: Records read at once by a snapshot (see StatusTracker._records).
_CHUNK = 500
#: A status watch that ran this long before it failed is started again after the
#: shortest delay; one that fails sooner waits longer each time (up to 30 s).
WATCH_HEALTHY_SECONDS = 60.0


async def follow_status(name: str, backend: Backend, interval: float,
                        apply: Callable[[str, StatusBatch], None]) -> None:
    """``apply(name, batch)`` for each status batch of the back end's watch; a watch
    that fails (a bug) or ends is started again after a back-off, never left dead."""
    backoff = Backoff(1.0, 30.0)
    while True:
        started = time.monotonic()
        try:
            async for batch in backend.watch(interval):
                try:
                    apply(name, batch)
                except Exception:
                    log.exception("applying status failed", backend=name)
            log.error("status watch ended; starting it again", backend=name)
        except Exception:
            log.exception("status watch failed; starting it again", backend=name)
        # Each start lists everything again: only a watch that ran a while earns the
        # short delay back (one that fails after its first batch must not relist every
        # second).
        if time.monotonic() - started >= WATCH_HEALTHY_SECONDS:
            backoff.reset()
        await backoff.sleep()


def _same(last: tuple[BackendJob, ...], jobs: tuple[BackendJob, ...]) -> bool:
    """Whether ``jobs`` are the very objects of ``last``, in the same order."""
    return len(last) == len(jobs) and all(map(operator.is_, last, jobs))


class StatusTracker:
    """Applies status batches to the store; ``forget(job_id)`` is called when a job
    finishes (the engine drops what it keeps about it)."""

    def __init__(self, store: Store, settings: EngineSettings,
                 forget: Callable[[int], None]) -> None:
        self.store = store
        self.settings = settings
        self._forget_elsewhere = forget
        #: uid -> status a back end reported while the job was still Pending here.
        self.early: dict[str, BackendJob] = {}
        self._missing: dict[int, tuple[int, float]] = {}
        #: job id -> (its record's updated_at, the reports it had) when a complete
        #: snapshot last changed nothing for it: the same again is skipped unread.
        self._applied: dict[int, tuple[float, tuple[BackendJob, ...]]] = {}
        self._owners = OwnerCheck()
        #: Back ends whose complete snapshot was applied since this start.
        self.confirmed: set[str] = set()
        #: back end -> (the jobs of its last complete snapshot, the store's write count),
        #: kept when applying that snapshot wrote nothing and it showed every tracked
        #: job: the same snapshot again (the same job objects: Slurm's "nothing changed"
        #: answer, or a listing whose jobs all converted as before) with nothing written
        #: since would change nothing, and is not compared job by job.
        self._settled: dict[str, tuple[tuple[BackendJob, ...], int]] = {}

    def apply(self, name: str, backend: Backend, batch: StatusBatch) -> None:
        """Move the tracked jobs of back end ``name`` according to ``batch``."""
        writes = self.store.write_count
        if batch.complete:
            settled = self._settled.pop(name, None)
            if settled is not None and settled[1] == writes and _same(settled[0], batch.jobs):
                self._settled[name] = settled
                self.confirmed.add(name)
                return
        seen: dict[str, list[BackendJob]] = {}
        for carrier in batch.jobs:
            seen.setdefault(carrier.job_uid, []).append(carrier)
        active = list(_ACTIVE)
        if batch.complete:
            # A snapshot of every job: compare it with what was applied last, by key
            # (no row decoded); only a job whose record or report changed since, or that
            # is missing from it, is read and applied. An idle cluster costs next to
            # nothing per poll, however many jobs it holds.
            keys = self.store.job_keys(active, name)
            tracked_uids = {uid for _, uid, _ in keys}
            tracked: Iterable[JobRecord] = self._records([
                job_id for job_id, uid, updated in keys
                if uid not in seen or self._applied.get(job_id) != (updated, tuple(seen[uid]))])
        else:
            # A change batch concerns its own jobs only: read just those (a watch sends a
            # batch per event; reading every tracked job each time costs jobs x events).
            tracked = [r for r in self.store.by_uids(list(seen), active) if r.backend == name]
            tracked_uids = {r.uid for r in tracked}  # once: per element it was quadratic
        # Status of a job whose submit (or adoption) is not recorded yet: a watch can tell
        # before the submit call has returned. Kept, and applied once it is recorded.
        untracked = [u for u in seen if u not in tracked_uids]
        if untracked:
            for rec in self.store.by_uids(untracked, [JobState.PENDING]):
                own = self.own(name, backend, rec, seen[rec.uid]) if rec.backend == name else None
                if own is not None:
                    self.early[rec.uid] = own
                    while len(self.early) > EARLY_STATUS_LIMIT:
                        self.early.pop(next(iter(self.early)))
        absent = 0
        for rec in tracked:
            bj = self.own(name, backend, rec, seen.get(rec.uid, ()))
            if bj is None or bj.backend_id != rec.backend_id:
                absent += 1
                self._applied.pop(rec.id, None)  # read again when it reappears
                if bj is not None:
                    log.error("back-end id differs from the recorded one", job_id=rec.id,
                              recorded=rec.backend_id, seen=bj.backend_id)
                if batch.complete:
                    self._note_missing(rec, batch.at)
                continue
            self._missing.pop(rec.id, None)
            if not self.apply_one(rec, bj) and batch.complete:  # the same again: no-op
                self._applied[rec.id] = (rec.updated_at, tuple(seen.get(rec.uid, ())))
        if batch.complete:
            self.confirmed.add(name)
            # Kept with the count from before it was applied: if it wrote (a report may
            # move a job a step at a time) the next one is compared again. Not kept while
            # a job is missing: that is counted at each snapshot.
            if not absent:
                self._settled[name] = (batch.jobs, writes)

    def _records(self, ids: list[int]) -> Iterator[JobRecord]:
        """The records of ``ids`` (ascending), read a chunk at a time: the first snapshot
        after a start reads every tracked job, and 6,000 records read at once left about
        12 MB more resident after they were freed (a fragmented heap) than 500 at once."""
        for start in range(0, len(ids), _CHUNK):
            yield from self.store.by_ids(ids[start:start + _CHUNK])

    def own(self, name: str, backend: Backend, rec: JobRecord,
            jobs: Iterable[BackendJob]) -> BackendJob | None:
        """The stored job's own back-end job among ``jobs`` (all carrying its uid)."""
        return self._owners.pick(name, backend, rec.id, rec.uid, rec.owner,
                                 rec.namespace, jobs, rec.backend_id)

    def _note_missing(self, rec: JobRecord, at: float) -> None:
        # A job submitted after the snapshot was taken is not missing.
        if rec.updated_at >= at - self.settings.poll_interval:
            return
        count, since = self._missing.get(rec.id, (0, at))
        count += 1
        self._missing[rec.id] = (count, since)
        if rec.cancel_requested and count >= self.settings.lost_after_snapshots:
            # Cancelled, and gone: Slurm keeps no record of a native array's pending
            # task cancelled alone (docs/slurm.md).
            self._forget(rec.id)
            self.store.transition(rec.id, JobState.CANCELLED, "Cancelled",
                                  f"cancelled; {rec.backend} keeps no record of job "
                                  f"{rec.backend_id}")
            return
        if (count >= self.settings.lost_after_snapshots
                and at - since >= self.settings.lost_after_seconds):
            self._forget(rec.id)
            self.store.transition(rec.id, JobState.FAILED, "BackendLost",
                                  f"{rec.backend} job {rec.backend_id} disappeared from the "
                                  f"back end before it was seen to finish")

    def _forget(self, job_id: int) -> None:
        """Drop what is kept about a job that has finished, here and in the engine."""
        self._applied.pop(job_id, None)
        self._missing.pop(job_id, None)
        self._forget_elsewhere(job_id)

    def apply_one(self, rec: JobRecord, bj: BackendJob) -> bool:
        """Write what ``bj`` means for ``rec`` (:func:`bridge.outcome.outcome`); whether
        anything was written."""
        result = outcome(rec, bj)
        if result is None:
            return False
        self.store.transition(rec.id, result.state, result.reason, result.message,
                              **result.fields)
        if result.state.terminal:
            self._forget(rec.id)
            log.info("job finished", job_id=rec.id, state=bj.state.value,
                     exit_code=bj.exit_code)
        return True
