"""The reconcile engine: admit → submit → track → finish.

One asyncio loop per daemon. The store is the truth; the loop only moves jobs
forward from what the store says and what the back ends report.

Idempotent submission (the crash contract):

1. Before a submit call the job's ``attempts`` is incremented and
   ``submitting_since`` set, in one transaction.
2. The back-end job carries the TrainJob uid (Slurm ``--comment``).
3. A job with ``attempts > 0`` is never submitted again before a
   :meth:`Backend.lookup` of its uid says the world does not have it; a lookup of a
   job whose submit may still be in flight (``submitting_since`` within
   ``submit_timeout``) waits until that window has passed.

So a daemon killed at any instant either finds the job in the world (adopts it)
or submits it once. Back ends that are down make jobs wait with exponential
backoff (state ``Pending``, reason ``BackendUnavailable``); nothing is dropped.

Status comes from each back end's :meth:`Backend.watch` stream: one query per poll
interval for all jobs, never one call per job.

Placement (docs/placement.md): before a job is submitted, :func:`plan_placement`
places it on the back end's topology (built from its inventory, read again when older
than ``placement_max_age``). Per back end the mode is ``constraints`` (default: the
prediction is recorded, the world chooses, ``--switches`` is passed on), ``nodelist``
(the chosen hosts are pinned) or ``none``. A job with ``--switches=N@T`` that does not
fit within N leaf switches now stays ``Pending`` with reason ``WaitingForTopology``
and is placed again every pass until T has passed since admission; then it is
submitted without the constraint. Jobs placed in one pass never share capacity.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import suppress

import structlog

from bridge.backend import (
    Backend,
    BackendJob,
    BackendRejected,
    BackendUnavailable,
    Estimating,
    Inventory,
    Owner,
    StatusBatch,
    SubmitRequest,
)
from bridge.backoff import backoff_delay
from bridge.engine_admission import check_capacity, prepare
from bridge.engine_array import ArrayThrottle
from bridge.engine_dependency import (
    DEPENDENCY,
    RETRY_REFUSED,
    DependencyGate,
    DependencyUnmet,
    UnreadableDependency,
    check_dependency_ids,
)
from bridge.engine_hold import can_hold_in_backend, set_held_in_backend, set_suspend
from bridge.engine_native_array import InFlight, NativeArrays, check_native_arrays
from bridge.engine_request import report_env, stored_shape, submit_request
from bridge.engine_settings import Admission as Admission
from bridge.engine_settings import EngineSettings as EngineSettings
from bridge.engine_signals import Signals
from bridge.engine_status import StatusTracker, follow_status
from bridge.errors import Conflict, InvalidRequest, PermissionDenied
from bridge.errors import EngineError as EngineError
from bridge.inventories import Inventories, PassTopologies
from bridge.model import (
    ANN_ADOPT_ONLY,
    TrainJob,
    ValidationError,
)
from bridge.placement_decision import DEFAULT_PLACEMENT_MODE, PlacementDecision, plan_placement
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import partition_of, scheduling_of
from bridge.shape import JobShape, resolve_shape
from bridge.states import JobState
from bridge.store import DuplicateJob, JobRecord, Store
from bridge.taskstop import cancel_and_wait
from bridge.topology import Topology

log = structlog.get_logger("hpc_bridge.engine")

#: Seconds a stopping engine waits for its cancelled tasks (below the 30 s a service
#: manager or a test gives a stopping daemon).
SHUTDOWN_GRACE = 10.0
#: Tasks still running this long after a cancellation are cancelled again.
CANCEL_AGAIN = 1.0


#: Reason of a Pending job that waits for ``--switches``.
WAITING_FOR_TOPOLOGY = "WaitingForTopology"


class Engine:
    """Owns the reconcile loop; the API and front doors call :meth:`admit`/:meth:`cancel`."""

    def __init__(self, store: Store, backends: Mapping[str, Backend], catalog: RuntimeCatalog,
                 settings: EngineSettings):
        if settings.default_backend not in backends:
            raise ValueError(f"default back end {settings.default_backend!r} is not configured")
        check_native_arrays(store, backends)
        self.store = store
        self.backends = dict(backends)
        self.catalog = catalog
        self.settings = settings
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._inflight: dict[int, asyncio.Task[None]] = {}
        #: The owner (uid) of each submission in flight, this pass's count of them per
        #: user, and the users who had due jobs left for a later pass (reconcile_once).
        self._inflight_owner: dict[int, int] = {}
        self._load: Counter[int] = Counter()
        self._capped: set[int] = set()
        #: Users whose due jobs the next pass reads in full (reconcile_once).
        self._read_all: set[int] = set()
        self._signals = Signals(store, self.backends)
        self._status = StatusTracker(store, settings, forget=self._forget)
        self._dependencies = DependencyGate(
            store, [n for n, b in backends.items() if getattr(b, "native_dependencies", False)],
            lambda name: name in self._status.confirmed)
        self._arrays = ArrayThrottle(store, lambda: self._inflight.keys())
        self._tasks: list[asyncio.Task[None]] = []
        self._submit_slots = asyncio.Semaphore(settings.max_parallel_submits)
        self._started_at = time.time()
        self._inventories = Inventories(settings.placement_max_age,
                                        settings.placement_min_reread)
        flight = InFlight(self._inflight, self._inflight_owner, self._capped, self._wake,
                          self._submit_slots, self._inventories.mark_stale)
        self._native = NativeArrays(store, self._status, self._request, self._retry_later,
                                    self._wait_again, settings, flight, self._arrays)
        self.ready = asyncio.Event()

    # -- front-door calls ----------------------------------------------------------

    def prepare(self, job: TrainJob, owner: Owner, origin: str = "api",
                taken_before: bool = False) -> Admission:
        """The checks and work of :meth:`admit` that need neither the store nor the
        loop's state: validation, the back end's admission of the caller, identity, back
        end, runtime, the stored forms. Safe to run in a worker thread (it reads only
        configuration); raises :class:`bridge.model.ValidationError` naming the field, or
        :class:`~bridge.errors.PermissionDenied` when the back end's admission refuses
        the caller."""
        return prepare(job, owner, origin, backends=self.backends, catalog=self.catalog,
                       settings=self.settings, taken_before=taken_before)

    def admit(self, job: TrainJob, owner: Owner, origin: str = "api",
              prepared: Admission | None = None, idempotency_key: str | None = None,
              request_digest: str | None = None, taken_before: bool = False) -> JobRecord:
        """Validate and persist a new job (state Pending, or Suspended if ``spec.suspend``).

        ``taken_before``: a bridge may have submitted it already (bridge.service); what its
        back end refuses today does not refuse it (it may be running under the rules it
        was admitted by, and a refusal would orphan it): it is adopted if its back end
        has it, else failed with the refusal, never submitted
        (:func:`bridge.engine_admission.prepare`).

        ``prepared``: :meth:`prepare` of this ``job`` for this ``owner`` and ``origin``,
        done already (off the loop). Raises :class:`bridge.model.ValidationError` (bad
        job, unknown runtime or back end), :class:`~bridge.errors.Conflict` (duplicate name,
        or an ``idempotency_key`` the owner used already) or
        :class:`~bridge.errors.PermissionDenied` (the back end's admission refused the
        caller). Nothing is stored on error.
        """
        if prepared is None or prepared.job is not job:
            prepared = self.prepare(job, owner, origin, taken_before)
        backend = prepared.backend
        self._check_capacity(backend, prepared.num_nodes, prepared.partition)
        check_dependency_ids(self.store, prepared.summary)
        state = JobState.SUSPENDED if job.spec.suspend else JobState.PENDING
        try:
            record = self.store.add(job, owner, backend, origin=origin, state=state,
                                    reason=(("JobHeldUser" if prepared.summary.get("hold")
                                             else "Suspended") if job.spec.suspend
                                            else "Created"),
                                    idempotency_key=idempotency_key,
                                    request_digest=request_digest,
                                    document=prepared.document, summary=prepared.summary,
                                    shape=prepared.shape, tasks=prepared.tasks)
        except DuplicateJob as exc:
            raise Conflict(str(exc)) from exc
        log.info("job admitted", job_id=record.id, uid=record.uid, user=owner.user,
                 backend=backend, runtime=job.spec.runtime_ref.name)
        self._wake.set()
        return record

    async def estimate(self, job: TrainJob, owner: Owner, prepared: Admission) -> str:
        """``tbatch --test-only``: the checks :meth:`admit` makes (but the caller's count
        of unfinished jobs), then the back end's estimate (:class:`Estimating`), or, for
        a back end that cannot estimate, that it would accept the job. Nothing is
        stored or submitted; :class:`InvalidRequest` when the back end would refuse it."""
        self._check_capacity(prepared.backend, prepared.num_nodes, prepared.partition)
        check_dependency_ids(self.store, prepared.summary)
        shape = (JobShape.from_json(prepared.shape) if prepared.shape is not None
                 else resolve_shape(job, self.catalog.resolve(job), scheduling_of(job)))
        backend = self.backends[prepared.backend]
        if not isinstance(backend, Estimating):
            return (f"Job would be accepted by back end {prepared.backend!r} "
                    f"({shape.nodes} node{'s' if shape.nodes != 1 else ''}); it cannot "
                    f"estimate a start time")
        request = SubmitRequest(job_uid=job.metadata.uid or "", job_id=0, job=job,
                                plan=shape.plan, options=scheduling_of(job), owner=owner,
                                shape=shape)
        try:
            return await backend.estimate(request)
        except BackendRejected as exc:
            raise InvalidRequest(str(exc)) from None

    def _check_capacity(self, backend: str, num_nodes: int, partition: str | None) -> None:
        check_capacity(self._inventories.get(backend), backend, self.backends[backend],
                       num_nodes, partition)

    def cancel(self, record: JobRecord, caller: Owner) -> JobRecord:
        """Ask for the job to stop. Only its owner or root may. Idempotent."""
        if caller.uid not in (0, record.owner.uid):
            raise PermissionDenied("Access/permission denied")
        if record.state.terminal:
            raise Conflict(f"Job/step already completing or completed ({record.state})")
        if record.state in (JobState.PENDING, JobState.SUSPENDED) and record.attempts == 0:
            return self.store.transition(record.id, JobState.CANCELLED, "Cancelled",
                                         f"cancelled by {caller.user} before submission",
                                         cancel_requested=True)
        updated = self.store.request_cancel(record.id)
        self._wake.set()
        return updated

    def set_suspend(self, record: JobRecord, suspend: bool, caller: Owner,
                    reason: str | None = None) -> JobRecord:
        """Suspend a job, or resume a suspended one.

        Before it reaches a back end the job just waits (state ``Suspended``). A job its
        back end runs can be suspended only when that back end is
        :class:`bridge.backend.Suspendable`: the request is recorded in the stored
        document (``spec.suspend``) and sent by the loop; the job stays ``Running`` with
        reason ``Suspended`` while the back end holds it. ``reason``: the one a job that
        has not reached its back end is given (default ``Suspended``/``Resumed``).
        """
        updated, wake = set_suspend(self.store, self.backends, record, suspend, caller, reason)
        self._signals.asked(record.id)  # a new request: a refused one may be tried again
        if wake:
            self._wake.set()
        return updated

    def can_hold_in_backend(self, record: JobRecord) -> bool:
        """Whether ``record`` waits in a back end's queue that can hold it
        (:func:`bridge.engine_hold.can_hold_in_backend`)."""
        return can_hold_in_backend(self.backends, record)

    def set_held_in_backend(self, record: JobRecord, hold: str | None,
                            caller: Owner) -> JobRecord:
        """Hold (reason ``hold``) or release (None) a job waiting in its back end's queue;
        the loop sends it (:func:`bridge.engine_hold.set_held_in_backend`)."""
        updated = set_held_in_backend(self.store, self.backends, record, hold, caller)
        self._signals.asked(record.id)
        self._wake.set()
        return updated

    # -- the loop --------------------------------------------------------------------

    async def run(self) -> None:
        """Start back ends and the loops; return when :meth:`stop` is called. Cancelled
        (the daemon stopping before it was ready), the back ends are closed as well."""
        try:
            for name, backend in self.backends.items():
                try:
                    await backend.start()
                    await self._inventories.read(name, backend)
                except (BackendUnavailable, TimeoutError) as exc:
                    log.warning("back end not reachable at start; will retry", backend=name,
                                error=str(exc) or type(exc).__name__)
            for name, backend in self.backends.items():
                self._tasks.append(asyncio.create_task(self._track(name, backend),
                                                       name=f"track-{name}"))
                self._tasks.append(asyncio.create_task(
                    self._inventories.refresh_forever(name, backend), name=f"inventory-{name}"))
            self.ready.set()
            while not self._stopping.is_set():
                self._wake.clear()  # a wake during the pass makes the next one at once
                try:
                    await self.reconcile_once()
                except Exception:  # a bug must not kill the daemon; log and go on
                    log.exception("reconcile pass failed")
                with suppress(TimeoutError):  # not wait_for: 3.11's can swallow a cancel
                    async with asyncio.timeout(self.settings.poll_interval):
                        await self._wake.wait()
        finally:
            await self._shutdown()

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def _shutdown(self) -> None:
        """Cancel the engine's tasks (again every :data:`CANCEL_AGAIN` while they run) and
        wait at most :data:`SHUTDOWN_GRACE` for them: a back-end call that does not end
        when cancelled must not keep the daemon from stopping (what it leaves half done
        is found again by its key at the next start, as after a crash)."""
        pending = await cancel_and_wait([*self._tasks, *self._inflight.values()],
                                        SHUTDOWN_GRACE, CANCEL_AGAIN)
        for task in pending:
            log.warning("task did not end within the shutdown grace after its "
                        "cancellation; left behind", task=task.get_name(),
                        grace_s=SHUTDOWN_GRACE)
        for backend in self.backends.values():
            with suppress(Exception):
                await backend.close()

    async def reconcile_once(self) -> None:
        """One pass: submit what is due, send cancels that are asked for."""
        now = time.time()
        self._arrays.changed(self._dependencies.wake(now, self._arrays.watching), now)
        # Only what is due, and only what has a cancel to send: a pass costs what
        # changed, not every job the daemon tracks. A user with N of their
        # max_parallel_submits turns free has only their first N due jobs read (a burst
        # of one user's submissions would cost a pass reading all of them per
        # admission), and those tried before or asked to cancel; a user with none free
        # has only those read, and the end of one of their submissions wakes the loop
        # (_capped). When the jobs read did not take every free turn (held by their
        # dependency, throttle or topology), the next pass, at once, reads all of the
        # user's due jobs: no job waits behind others that cannot go.
        self._load = Counter(self._inflight_owner.values())
        self._capped.clear()
        read_all, self._read_all = self._read_all, set()
        cap = self.settings.max_parallel_submits
        taken: Counter[int] = Counter()
        cut: set[int] = set()
        wanted: list[int] = []
        for job_id, owner_uid, look in self.store.due_keys(now):
            if job_id in self._inflight:
                continue
            free = cap - self._load[owner_uid]
            # A follow-up pass reads every user with a free turn in full: no user is cut
            # in it, so follow-ups of two users cannot wake each other forever.
            if look or owner_uid in read_all or (read_all and free > 0) \
                    or taken[owner_uid] < free:
                taken[owner_uid] += not look
                wanted.append(job_id)
            elif self._load[owner_uid] >= cap:
                self._capped.add(owner_uid)
            else:
                cut.add(owner_uid)
        due = self.store.by_ids(wanted)
        # Cancelled before reaching the world, and never attempted: done here.
        for rec in [r for r in due if r.cancel_requested and r.attempts == 0]:
            self.store.transition(rec.id, JobState.CANCELLED, "Cancelled", "cancelled")
        due = [r for r in due if not (r.cancel_requested and r.attempts == 0)]
        due = self._dependencies.split(due, now)  # held until their --dependency is met
        due = self._arrays.split(due, now)  # an array's tasks past its throttle wait
        # At most max_parallel_submits submissions in flight per user: one user's
        # thousand due jobs (an array) go in turns, not all in front of another user's
        # one; the others stay due, and the end of a capped user's submission wakes the
        # loop. Counted where a submission starts (_submit_due), so a job that waits
        # for topology or its submit window takes no turn.
        by_backend: dict[str, list[JobRecord]] = {}
        for rec in due:
            # A submit that may still be in flight (daemon killed mid-call): wait it out.
            if (rec.submitting_since is not None
                    and now < rec.submitting_since + self.settings.submit_timeout):
                continue
            by_backend.setdefault(rec.backend, []).append(rec)
        for name, records in by_backend.items():
            try:
                await self._submit_due(name, self.backends[name], records)
            except Exception:  # cancels below, and other back ends, must still go on
                log.exception("submitting due jobs failed", backend=name)
        # Users with due jobs not read: those whose turns are all taken now are woken by
        # the end of a submission; those left with turns free are read in full at once.
        live = Counter(self._inflight_owner.values())  # ends during the pass count
        for uid in cut:
            (self._read_all if live[uid] < cap else self._capped).add(uid)
        if self._read_all:
            self._wake.set()
        await self._signals.send_cancels(now)
        await self._signals.send_suspends()

    async def _submit_due(self, name: str, backend: Backend, records: list[JobRecord]) -> None:
        uncertain = [r for r in records if r.attempts > 0]
        found: dict[str, list[BackendJob]] = {}
        if uncertain:
            try:
                for carrier in await backend.lookup([r.uid for r in uncertain]):
                    found.setdefault(carrier.job_uid, []).append(carrier)
            except BackendUnavailable as exc:
                for rec in uncertain:
                    self._retry_later(rec, exc)
                records = [r for r in records if r.attempts == 0]
        owned = {r.uid for r in uncertain if self._own(name, r, found.get(r.uid, ()))}
        groups, records = self._native.split(backend, records, time.time(), owned)
        for group in groups:  # one submission each (bridge/engine_native_array.py)
            self._native.start(name, backend, group, self._load)
        mode = self.settings.placement.get(name, DEFAULT_PLACEMENT_MODE)
        # By partition: a Slurm partition may have a topology of its own (25.05+).
        topologies = PassTopologies(self._inventories, name, backend)
        for rec in records:
            bj = self._own(name, rec, found.get(rec.uid, ()))
            if bj is not None:
                adopted = self.store.transition(
                    rec.id, JobState.SUBMITTED, "Adopted",
                    f"found {name} job {bj.backend_id} after restart",
                    backend_id=bj.backend_id, submitting_since=None)
                log.info("adopted job found in back end", job_id=rec.id,
                         backend_id=bj.backend_id)
                # The lookup is the world's word now; a watch may never mention it again
                # (a job that finished while the daemon was away).
                self._status.early.pop(rec.uid, None)
                self._status.apply_one(adopted, bj)
                continue
            if rec.cancel_requested:
                self.store.transition(rec.id, JobState.CANCELLED, "Cancelled",
                                      "cancelled before submission", submitting_since=None)
                continue
            if self._load[rec.owner.uid] >= self.settings.max_parallel_submits:
                self._capped.add(rec.owner.uid)  # its turn comes (reconcile_once)
                continue
            refusal = rec.job.metadata.annotations.get(ANN_ADOPT_ONLY)
            if refusal is not None:  # re-admitted, refused today, not in its back end
                self.store.transition(rec.id, JobState.FAILED, "InvalidJob",
                                      f"not found in {name}, and not submitted again: "
                                      f"{refusal}", submitting_since=None)
                continue
            decision: PlacementDecision | None = None
            if mode != "none":
                topology = await topologies.for_partition(partition_of(rec.job))
                decision = self._decide(name, rec, mode, topology)
                if decision is not None and decision.wait:
                    self._wait_for_topology(rec, decision)
                    continue
                if decision is not None:
                    topologies.book(rec.id, decision)  # the next job not on these hosts
            self._inflight_owner[rec.id] = rec.owner.uid
            self._load[rec.owner.uid] += 1
            self._inflight[rec.id] = asyncio.create_task(
                self._submit(name, backend, rec, decision), name=f"submit-{rec.id}")

    def _decide(self, name: str, rec: JobRecord, mode: str,
                topology: Topology | None) -> PlacementDecision | None:
        """:func:`plan_placement` for a stored job (None if the job is invalid: the
        submit path fails it with the reason)."""
        try:
            plan = self._shape(rec).plan
            options = scheduling_of(rec.job)
        except ValidationError:
            return None
        queue_places = getattr(self.backends[name], "queue_places", None)
        if options.switches is not None and queue_places and queue_places(rec.job):
            # An outside queue (Kueue) got the request and enforces it: not waited for.
            options = options.model_copy(update={"switches": None,
                                                 "switches_wait_minutes": None})
        try:
            return plan_placement(rec.job, plan, options, mode, topology, rec.created_at,
                                  time.time(), backend=name,
                                  pack_units=bool(getattr(self.backends[name], "packs_units",
                                                          False)))
        except Exception:  # one job's data must never stop the pass for every other job
            log.exception("placement failed; the back end chooses", job_id=rec.id)
            return None

    def _wait_for_topology(self, rec: JobRecord, decision: PlacementDecision) -> None:
        if rec.reason == WAITING_FOR_TOPOLOGY and rec.message == decision.note:
            return
        # From Pending only: a hold made while the pass read the topology stands.
        if self.store.transition_from(rec.id, JobState.PENDING, JobState.PENDING,
                                      WAITING_FOR_TOPOLOGY, decision.note,
                                      placement=decision.record(time.time())) is None:
            return
        log.info("job waits for its topology constraint", job_id=rec.id, note=decision.note)

    async def _submit(self, name: str, backend: Backend, rec: JobRecord,
                      decision: PlacementDecision | None = None) -> None:
        claimed: JobRecord | None = None
        #: The job is, or may be, in its back end: its hosts stay booked (finally).
        reached = False
        try:
            async with self._submit_slots:
                now = time.time()
                claimed = self.store.claim_submission(
                    rec.id, rec.attempts, submitting_since=now,
                    placement=decision.record(now) if decision else None)
                if claimed is None:  # held or cancelled since the pass read it
                    log.info("job changed before its submission; not submitted",
                             job_id=rec.id)
                    return
                rec = claimed
                try:
                    # The token file may sit on a network file system: off the loop.
                    report = await asyncio.to_thread(
                        report_env, rec, self.settings.status_reports, backend)
                    request = self._request(rec, decision, report)
                except ValidationError as exc:
                    self.store.transition(rec.id, JobState.FAILED, "InvalidJob", str(exc),
                                          submitting_since=None)
                    return
                except (DependencyUnmet, UnreadableDependency) as exc:
                    # Its dependency moved since the pass let it go: it waits again,
                    # as never tried (nothing was sent; a retried job was looked up
                    # first and is not in its back end), so the gate holds it.
                    self._wait_again(rec, str(exc), now)
                    return
                try:
                    async with asyncio.timeout(self.settings.submit_timeout):
                        backend_id = await backend.submit(request)
                except BackendRejected as exc:
                    if request.dependency and "dependency" in str(exc).lower():
                        # A job it names is gone from the back end already (purged):
                        # the bridge decides again once its status says so.
                        self._wait_again(rec, f"{name} refused the dependency "
                                         f"{request.dependency}: {exc}", now + RETRY_REFUSED)
                        return
                    self.store.transition(rec.id, JobState.FAILED, "SubmitRejected", str(exc),
                                          submitting_since=None)
                    log.warning("back end rejected job", job_id=rec.id, error=str(exc))
                    return
                except (BackendUnavailable, TimeoutError) as exc:
                    reached = True  # a cut-off sbatch may have queued it
                    self._retry_later(rec, exc)
                    return
                message = f"{name} job {backend_id}"
                if request.dependency:
                    message += f"; its dependency is {name}'s: {request.dependency}"
                if decision is not None and decision.relaxed:
                    message += f"; {decision.note}"
                record = self.store.transition(rec.id, JobState.SUBMITTED, "Submitted",
                                               message, backend_id=backend_id,
                                               submitting_since=None)
                reached = True
                early = self._status.early.pop(rec.uid, None)
                if early is not None and early.backend_id == backend_id:
                    self._status.apply_one(record, early)
                # The world changed: the next placement reads the inventory again.
                self._inventories.mark_stale(name)
                log.info("job submitted", job_id=rec.id, backend=name, backend_id=backend_id,
                         placement=(",".join(decision.placement.hosts)
                                    if decision and decision.placement else None),
                         pinned=bool(decision and decision.pin))
        finally:
            # Its hosts stay booked until the inventory holds the job; a job that did
            # not reach its back end frees them now.
            self._inventories.ended(name, rec.id, reached)
            self._inflight.pop(rec.id, None)
            if self._inflight_owner.pop(rec.id, None) in self._capped:
                self._wake.set()  # this user's next due jobs may go now
            if claimed is None and rec.array_job_id is not None:
                # Let go by its array's throttle but never submitted: its place is free.
                self._arrays.changed({rec.id}, time.time())

    def _wait_again(self, rec: JobRecord, message: str, due: float) -> None:
        """Back to waiting for its dependency, as never tried (nothing reached the back
        end), due at ``due``."""
        self.store.transition_from(rec.id, JobState.PENDING, JobState.PENDING, DEPENDENCY,
                                   message[:1024], submitting_since=None, attempts=0,
                                   next_attempt_at=due)

    def _retry_later(self, rec: JobRecord, exc: BaseException) -> None:
        delay = backoff_delay(max(rec.attempts, 1), self.settings.retry_base,
                              self.settings.retry_cap)
        message = str(exc) or type(exc).__name__
        self.store.transition_from(rec.id, rec.state, rec.state, "BackendUnavailable",
                                   f"{message}; retrying in {delay:.0f}s",
                                   next_attempt_at=time.time() + delay, submitting_since=None)
        log.warning("back end unavailable; will retry", job_id=rec.id, error=message,
                    delay=round(delay, 1))

    def _shape(self, rec: JobRecord) -> JobShape:
        return stored_shape(rec, self.catalog)

    def _request(self, rec: JobRecord, decision: PlacementDecision | None = None,
                 report: tuple[dict[str, str], dict[str, str]] = ({}, {})) -> SubmitRequest:
        return submit_request(rec, self.catalog, decision, self._dependencies.native(rec),
                              report)

    # -- tracking --------------------------------------------------------------------

    def inventory(self, backend: str) -> Inventory | None:
        """The last inventory read from ``backend`` (None before the first)."""
        return self._inventories.get(backend)

    async def _track(self, name: str, backend: Backend) -> None:
        await follow_status(name, backend, self.settings.poll_interval, self.apply_status)

    def apply_status(self, name: str, batch: StatusBatch) -> None:
        """Move tracked jobs of back end ``name`` according to one status batch
        (:meth:`bridge.engine_status.StatusTracker.apply`)."""
        self._status.apply(name, self.backends[name], batch)

    def _own(self, name: str, rec: JobRecord, jobs: Iterable[BackendJob]) -> BackendJob | None:
        """The stored job's own back-end job among ``jobs`` (all carrying its uid)."""
        return self._status.own(name, self.backends[name], rec, jobs)

    def _forget(self, job_id: int) -> None:
        """Drop what the engine keeps in memory about a job that has finished."""
        self._signals.forget(job_id)
