"""JobService: the one narrow interface every front door uses (the HTTP API, TrainJob
CRs): admit, cancel, suspend, resume, find, list, read output, and the change feed.

No front door touches the store or a concrete back end; they hold a :class:`JobService`
and use the names this module exports (:class:`JobRecord`, :class:`EngineError`,
:class:`JobNotFound`, :class:`Event` ...). The service is thin: each call delegates
to the engine (which decides) or the store (which remembers), with the same
semantics as those calls; it adds no policy.

Contract of the change feed:

* :meth:`JobService.changes` reads the outbox: every state change of every job is
  one :class:`Event` with a sequence number that only grows (one writer, one loop).
  ``changes(since)`` answers the events after ``since``, oldest first, and a cursor;
  passing the cursor back never skips an event and never answers one twice.
* :meth:`JobService.wait_for_changes` returns as soon as an event after a cursor
  exists (woken through :class:`bridge.feed.EventFeed`) or when its timeout passes.
* A change *within* a state (reason, message, bookkeeping fields, the stored document:
  e.g. ``Pending`` → ``Pending/BackendUnavailable``, a suspend request) writes no
  outbox row, hence no event. A door that shows such fields (the CR door's status)
  subscribes to them with :meth:`JobService.updates`: the ids of jobs changed that way
  in this process. They are not durable: a restarted door syncs everything once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bridge.backend import (
    Backend,
    BackendJob,
    BackendState,
    BackendUnavailable,
    Owner,
    ReportsJobsStatus,
)
from bridge.engine import Engine, EngineError
from bridge.engine_admission import backend_name
from bridge.engine_hold import RELEASING, held_in_backend
from bridge.engine_settings import Admission
from bridge.errors import BridgeError, Conflict, PermissionDenied
from bridge.feed import EventFeed
from bridge.model import ClusterTrainingRuntime, TrainingRuntime, TrainJob, ValidationError
from bridge.outbox import Event
from bridge.refs import AmbiguousJob
from bridge.runtimes import LaunchPlan
from bridge.scheduling import scheduling_of
from bridge.states import IllegalTransition, JobState
from bridge.store import JobNotFound, JobRecord, Transition
from bridge.store_listing import ListRow

#: Reasons of a held job (``tbatch --hold``, ``tcontrol hold``), as Slurm names them.
HELD = frozenset({"JobHeldUser", "JobHeldAdmin"})

__all__ = ["Admission", "Admitted", "AmbiguousJob", "EngineError", "Event", "JobNotFound",
           "JobPage", "JobRecord", "JobService", "JobUpdates", "OutputChunk", "Transition"]

log = structlog.get_logger("hpc_bridge.service")

#: Tasks of an array acted on (:meth:`JobService.apply_to_array`) between two turns of
#: the event loop.
ARRAY_STEP = 32

#: Events one :meth:`JobService.changes` call answers when the caller names no limit.
CHANGES_LIMIT = 1000


@dataclass(frozen=True)
class Admitted:
    """What :meth:`JobService.admit` (or :meth:`JobService.replay`) did: ``record`` is
    the job; ``replayed``: an earlier submission with the caller's idempotency key made
    it (nothing new was stored); ``conflict``: that earlier submission had another body
    (``record`` is the earlier job; the new one was refused)."""

    record: JobRecord
    replayed: bool = False
    conflict: bool = False


@dataclass(frozen=True)
class JobPage:
    """One page of a listing: the records (light rows, oldest first) and, when more
    follow, the id to pass as ``after_id`` for the next page (None: this was the last)."""

    items: list[JobRecord]
    next_after: int | None = None


@dataclass(frozen=True)
class RowPage:
    """:class:`JobPage` of listing rows (:class:`bridge.store_listing.ListRow`)."""

    items: list[ListRow]
    next_after: int | None = None


@dataclass(frozen=True)
class OutputChunk:
    """One read of a job's output: the bytes, the offset to read from next, and whether
    the job had finished before this read (then no byte follows what was read)."""

    data: bytes
    offset: int
    finished: bool


class JobUpdates:
    """A subscription to the jobs changed within their state (:meth:`JobService.updates`):
    :meth:`take` answers the ids gathered since the last take; ``wake`` (when given) is
    set on each such change."""

    def __init__(self, wake: asyncio.Event | None = None) -> None:
        self._ids: set[int] = set()
        self.wake = wake or asyncio.Event()

    def add(self, job_id: int) -> None:
        self._ids.add(job_id)
        self.wake.set()

    def take(self) -> set[int]:
        """The ids gathered since the last call (each once), and forget them."""
        ids, self._ids = self._ids, set()
        return ids


class JobService:
    """The front doors' interface to the engine and the store (module docstring).

    Every method runs on the event loop except :meth:`prepare` (a worker thread may run
    it: it touches no store and no loop state). Errors are the engine's and the
    store's: :class:`bridge.model.ValidationError` (bad input), :class:`EngineError`
    (refused: permission, conflict, state), :class:`JobNotFound`, :class:`AmbiguousJob`.
    """

    def __init__(self, engine: Engine, feed: EventFeed) -> None:
        self._engine = engine
        self._store = engine.store
        self._feed = feed

    # -- admission -------------------------------------------------------------------

    def is_ready(self) -> bool:
        """Whether the engine has started (its back ends were tried once)."""
        return self._engine.ready.is_set()

    def prepare(self, job: TrainJob, owner: Owner, origin: str = "api") -> Admission:
        """Validate ``job`` and work out its stored forms (:meth:`Engine.prepare`); safe
        in a worker thread."""
        return self._engine.prepare(job, owner, origin)

    def set_runtimes(self, source: str,
                     runtimes: list[ClusterTrainingRuntime | TrainingRuntime]) -> None:
        """Make ``runtimes`` all the runtimes cluster ``source`` (a front door) has
        (:meth:`bridge.runtimes.RuntimeCatalog.set_layer`): jobs admitted from now on
        resolve against them; admitted jobs keep the runtime they were admitted with
        (their stored shape)."""
        self._engine.catalog.set_layer(source, runtimes)

    def replay(self, owner: Owner, key: str, digest: str) -> Admitted | None:
        """The earlier job ``owner`` submitted with idempotency ``key`` (``replayed``;
        ``conflict`` when its request's SHA-256 was not ``digest``), or None when the key
        is new."""
        first = self._store.by_idempotency_key(owner.uid, key)
        if first is None:
            return None
        return Admitted(first, replayed=True, conflict=first.request_digest != digest)

    def admit(self, job: TrainJob, owner: Owner, *, origin: str = "api",
              prepared: Admission | None = None, idempotency_key: str | None = None,
              request_digest: str | None = None, taken_before: bool = False) -> Admitted:
        """Store ``job`` as a new job of ``owner`` (:meth:`Engine.admit`: ``Pending``, or
        ``Suspended`` with ``spec.suspend``); ``prepared``: :meth:`prepare` of it, done.

        With an ``idempotency_key`` a submission happens once per owner and key: when
        another submission with the key got in first (a race of two retries), the
        answer is that one's job (:meth:`replay`) instead of a 409.
        ``taken_before``: a bridge may have submitted this job already (its TrainJob
        carries the door's finalizer but this store has no record: a lost store, a new
        leader); it is stored with ``attempts=1``, so the engine looks it up in its back
        end (and adopts it) before it ever submits it; the options its back end refuses
        today are not refused again (a refusal would orphan a job that may be running).
        """
        try:
            record = self._engine.admit(job, owner, origin, prepared=prepared,
                                        idempotency_key=idempotency_key,
                                        request_digest=request_digest,
                                        taken_before=taken_before)
        except Conflict:
            if idempotency_key is not None and (replayed := self.replay(
                    owner, idempotency_key, request_digest or "")) is not None:
                return replayed
            raise
        if taken_before:  # no await since admit: the engine has not looked at it yet
            record = self._store.update(record.id, attempts=1)
        return Admitted(record)

    def destination(self, job: TrainJob, origin: str) -> tuple[Backend, LaunchPlan] | None:
        """The back end ``job`` would go to and its runtime merged with it, as admission
        works them out now (no check made, nothing stored); None when either is
        unknown or the job is invalid (admission refuses it, naming the field)."""
        try:
            name = backend_name(job, scheduling_of(job), self._engine.settings)
            backend = self._engine.backends.get(name)
            plan = self._engine.catalog.resolve(job, origin)
        except ValidationError:
            return None
        return None if backend is None else (backend, plan)

    def count_active(self, owner_uid: int, at_most: int | None = None) -> int:
        """How many unfinished jobs the user ``owner_uid`` has (counted no further than
        ``at_most``)."""
        return self._store.count_active(owner_uid, at_most)

    # -- changing a job --------------------------------------------------------------

    def cancel(self, record: JobRecord, caller: Owner) -> JobRecord:
        """Ask for the job to stop (:meth:`Engine.cancel`: its owner or root only)."""
        return self._engine.cancel(record, caller)

    def suspend(self, record: JobRecord, caller: Owner) -> JobRecord:
        """Suspend the job (:meth:`Engine.set_suspend`)."""
        return self._engine.set_suspend(record, True, caller)

    def resume(self, record: JobRecord, caller: Owner) -> JobRecord:
        """Resume a suspended job (:meth:`Engine.set_suspend`); a held one is released
        with :meth:`release`, not resumed (:class:`Conflict`)."""
        if record.state is JobState.SUSPENDED and record.reason in HELD:
            self._owner_or_root(record, caller)
            raise Conflict("Job is held, not suspended: release it (tcontrol release)")
        return self._engine.set_suspend(record, False, caller)

    async def estimate(self, job: TrainJob, owner: Owner, prepared: Admission) -> str:
        """``--test-only`` (:meth:`Engine.estimate`): nothing is stored."""
        return await self._engine.estimate(job, owner, prepared)

    def hold(self, record: JobRecord, caller: Owner) -> JobRecord:
        """``scontrol hold``: a job that has not reached its back end waits until
        :meth:`release` (state Suspended, reason ``JobHeldUser``, or ``JobHeldAdmin`` when
        root holds another user's job: then only root may release it). A job already
        waiting in the queue of a back end that can hold it (Slurm) and never
        started is held there (it stays Submitted; its back end gives the reason:
        :meth:`bridge.engine.Engine.set_held_in_backend`). Only its owner or root may;
        :class:`Conflict` for a job that started, or suspended rather than held."""
        self._owner_or_root(record, caller)
        admin = caller.uid == 0 and record.owner.uid != 0
        reason = "JobHeldAdmin" if admin else "JobHeldUser"
        if record.state is JobState.SUSPENDED and record.attempts == 0:
            if record.reason in HELD:
                return record
            raise Conflict("Job is suspended, not pending: resume it first")
        if record.held in RELEASING:
            raise Conflict("Job's release is being sent to its back end: try again shortly")
        if self._engine.can_hold_in_backend(record):
            held = held_in_backend(record)
            if held == "JobHeldAdmin" or held == reason:
                return record  # held already (an administrator's hold stands)
            return self._engine.set_held_in_backend(record, reason, caller)
        if record.state is not JobState.PENDING or record.attempts > 0:
            raise Conflict(f"Job is no longer pending execution ({record.state} in back end "
                           f"{record.backend!r})")
        return self._engine.set_suspend(record, True, caller, reason=reason)

    def release(self, record: JobRecord, caller: Owner) -> JobRecord:
        """``scontrol release``: a held job goes back to Pending (reason ``Released``);
        :class:`Conflict` for a job that is not held; an admin's hold only by root."""
        self._owner_or_root(record, caller)
        held = held_in_backend(record)
        if held is not None:  # held in its back end's queue (even if it started since)
            if held == "JobHeldAdmin" and caller.uid != 0:
                raise PermissionDenied("Access/permission denied (an administrator's hold)")
            return self._engine.set_held_in_backend(record, None, caller)
        if record.state is not JobState.SUSPENDED or record.reason not in HELD:
            raise Conflict(f"Job is not held ({record.state}, {record.reason})")
        if record.reason == "JobHeldAdmin" and caller.uid != 0:
            raise PermissionDenied("Access/permission denied (an administrator's hold)")
        return self._engine.set_suspend(record, False, caller, reason="Released")

    async def apply_to_array(self, head: JobRecord, caller: Owner,
                             act: Callable[[JobService, JobRecord, Owner], JobRecord]
                             ) -> JobRecord:
        """``act`` (:meth:`cancel`, :meth:`hold` ...) on every task of the array whose
        job id is ``head.id``, as scancel and scontrol act on ``A``: a task it does not
        apply to (:class:`Conflict`: finished, not held ...; :class:`PermissionDenied`:
        held by an administrator) is skipped; when it applies to none, the first task's
        error is raised. Answers the first task, read again. The loop serves others
        between every :data:`ARRAY_STEP` tasks (a thousand are a second's writes)."""
        first: BridgeError | None = None
        applied = False
        for n, job_id in enumerate(self._store.array_task_ids(head.id)):
            if n and n % ARRAY_STEP == 0:
                await asyncio.sleep(0)
            try:
                # Read just before acting, with no await between: the engine moves
                # tasks while the loop serves others (a claim, an end).
                act(self, self._store.get(job_id), caller)
                applied = True
            except (Conflict, PermissionDenied, IllegalTransition) as exc:
                first = first or exc
        if not applied and first is not None:
            raise Conflict(str(first)) if isinstance(first, IllegalTransition) else first
        return self._store.get(head.id)

    @staticmethod
    def _owner_or_root(record: JobRecord, caller: Owner) -> None:
        if caller.uid not in (0, record.owner.uid):
            raise PermissionDenied("Access/permission denied")

    def set_suspend(self, record: JobRecord, suspend: bool, caller: Owner) -> JobRecord:
        """:meth:`suspend` or :meth:`resume`, as ``suspend`` says."""
        return self._engine.set_suspend(record, suspend, caller)

    # -- reading jobs ----------------------------------------------------------------

    def find(self, ref: str, namespace: str | None, caller: Owner) -> JobRecord:
        """The job ``ref`` names for ``caller`` (:meth:`bridge.store.Store.find`: a
        numeric id is global; a uid or name prefers the caller's own jobs)."""
        return self._store.find(ref, namespace, caller_uid=caller.uid)

    def get(self, job_id: int) -> JobRecord:
        """The job with this id (:class:`JobNotFound` if none)."""
        return self._store.get(job_id)

    def get_by_uid(self, uid: str) -> JobRecord | None:
        """The job with this uid (a TrainJob's ``metadata.uid``), or None."""
        return self._store.get_by_uid(uid)

    def by_idempotency_key(self, owner_uid: int, key: str) -> JobRecord | None:
        """The job ``owner_uid`` submitted with idempotency key ``key``, or None."""
        return self._store.by_idempotency_key(owner_uid, key)

    def transitions(self, job_id: int) -> list[Transition]:
        """The job's state changes, oldest first."""
        return self._store.transitions(job_id)

    def trainer_statuses(self, job_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The latest progress report of each job that has one (bridge/store_progress.py)."""
        return self._store.trainer_statuses(job_ids)

    def list_jobs(self, states: Sequence[JobState] | None = None, *, user: str | None = None,
                  backend: str | None = None, origin: str | None = None,
                  after_id: int | None = None, limit: int | None = None) -> JobPage:
        """Jobs matching every filter given (``states`` None: all), oldest first, after
        ``after_id``, at most ``limit`` (None: all): light rows, each document read on
        first use."""
        rows = self._store.list_jobs(states, user=user, backend=backend, origin=origin,
                                     after_id=after_id,
                                     limit=None if limit is None else limit + 1)
        if limit is not None and len(rows) > limit:
            return JobPage(rows[:limit], rows[limit - 1].id)
        return JobPage(rows)

    def list_rows(self, states: Sequence[JobState] | None = None, *, user: str | None = None,
                  backend: str | None = None, after_id: int | None = None,
                  limit: int) -> RowPage:
        """:meth:`list_jobs`' page as listing rows (:mod:`bridge.store_listing`: the
        columns the API's listing shows, no record built)."""
        rows = self._store.list_rows(states, user=user, backend=backend, after_id=after_id,
                                     limit=limit + 1)
        if len(rows) > limit:
            return RowPage(rows[:limit], rows[limit - 1].id)
        return RowPage(rows)

    def table_rows(self, states: Sequence[JobState] | None = None, *, user: str | None = None,
                   backend: str | None = None, after_id: int | None = None,
                   limit: int) -> tuple[list[tuple[Any, ...]], int | None]:
        """:meth:`list_rows`' page as the rows squeue's default table is rendered from
        (:data:`bridge.queue_table.TABLE_COLUMNS`), and the id the next page starts
        after (None: this page is the last)."""
        rows = self._store.table_rows(states, user=user, backend=backend, after_id=after_id,
                                      limit=limit + 1)
        if len(rows) > limit:
            return rows[:limit], rows[limit - 1][0]
        return rows, None

    async def read_output(self, job_id: int, caller: Owner, stream: str,
                          offset: int) -> OutputChunk:
        """Read the job's ``stream`` (``stdout``/``stderr``) from byte ``offset`` through
        its back end. Only its owner or root may (else
        :class:`bridge.errors.PermissionDenied`). A back end that cannot be reached reads
        nothing (logged); a file the back end refuses to read raises
        :class:`bridge.output.OutputRefused`."""
        rec = self._store.get(job_id)
        if caller.uid not in (0, rec.owner.uid):
            raise PermissionDenied("Access/permission denied: only the job's owner may read "
                                   "its output")
        finished = rec.state.terminal
        path = rec.stdout_path if stream == "stdout" else rec.stderr_path
        backend = self._engine.backends.get(rec.backend)
        # A back end that runs pods keeps no output file: its log is the pod's.
        if not rec.backend_id or backend is None or (
                not path and not getattr(backend, "runs_pods", False)):
            return OutputChunk(b"", offset, finished)
        bj = BackendJob(backend_id=rec.backend_id, job_uid=rec.uid,
                        state=BackendState.UNKNOWN, stdout_path=rec.stdout_path,
                        stderr_path=rec.stderr_path, owner_uid=rec.owner.uid)
        try:
            data, offset = await backend.read_log(bj, stream, offset)
        except BackendUnavailable as exc:
            log.warning("reading output failed", job_id=rec.id, error=str(exc))
            return OutputChunk(b"", offset, finished)
        return OutputChunk(data, offset, finished)

    def jobs_status(self, record: JobRecord) -> list[dict[str, Any]] | None:
        """What the job's back end reports of its parts (a JobSet's
        ``replicatedJobsStatus``) when it is :class:`ReportsJobsStatus`; else None."""
        backend = self._engine.backends.get(record.backend)
        if not isinstance(backend, ReportsJobsStatus):
            return None
        # The JobSet's own namespace: another namespace's JobSet may carry this uid.
        namespace = (record.backend_id.partition("/")[0] if record.backend_id
                     else record.namespace)
        return backend.jobs_status(namespace, record.uid)

    def on_jobs_status(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(job_uid)`` whenever a back end's :meth:`jobs_status` of a job
        may have changed; the function returned stops it."""
        stops: list[Callable[[], None]] = []

        def stop() -> None:
            for one in stops:
                one()
        try:
            for backend in self._engine.backends.values():
                if isinstance(backend, ReportsJobsStatus):
                    stops.append(backend.on_jobs_status(listener))
        except BaseException:
            stop()
            raise
        return stop

    # -- the change feed -------------------------------------------------------------

    def cursor(self) -> int:
        """The newest event's sequence number now (0 when there is none): pass it to
        :meth:`changes` to read only what happens from now on."""
        return self._store.last_event_id()

    def changes(self, since: int, limit: int = CHANGES_LIMIT, *, upto: int | None = None,
                owner_uid: int | None = None) -> tuple[list[Event], int]:
        """The events with ``since < id <= upto`` (``upto`` None: the newest now),
        oldest first, at most ``limit``; only those of ``owner_uid``'s jobs when given.
        Also the cursor for the next call: the last event answered when ``limit`` were,
        else ``upto`` (or the newest): every event up to it was looked at."""
        newest = self._store.last_event_id() if upto is None else upto
        rows = self._store.events_after(since, limit, upto=newest, owner_uid=owner_uid)
        if len(rows) >= limit:
            return rows, rows[-1].id
        return rows, max(since, newest)

    async def wait_for_changes(self, cursor: int, seconds: float) -> bool:
        """Wait until an event after ``cursor`` exists (True) or ``seconds``
        passed (False)."""
        return await self._feed.wait_after(cursor, seconds)

    def updates(self, wake: asyncio.Event | None = None) -> JobUpdates:
        """Subscribe to the jobs changed within their state from now on (module
        docstring); ``wake`` is set on each. End it with :meth:`stop_updates`."""
        subscription = JobUpdates(wake)
        self._store.update_listeners.append(subscription.add)
        return subscription

    def stop_updates(self, subscription: JobUpdates) -> None:
        """End a subscription of :meth:`updates`."""
        listeners = self._store.update_listeners
        if subscription.add in listeners:
            listeners.remove(subscription.add)
