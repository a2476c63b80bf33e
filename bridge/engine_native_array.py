"""The engine's side of native Slurm arrays (docs/slurm.md): the due tasks of an array
admitted as native go to their back end in one submission, each still a job of its own.

Contract:

* :func:`native_mode` (admission) says whether an array goes native: its back end
  submits native arrays (``native_arrays``: the Slurm back end's setting), its output
  names do not name each task's own id (``%j``), its dependency names no ``aftercorr``
  or ``singleton`` (those differ per task) and its back end's placement does not pin
  hosts (``nodelist``). Admission then stores its tasks all due (Slurm's ``%N``
  throttles them, not the bridge's :class:`~bridge.engine_array.ArrayThrottle`) with
  :data:`NATIVE` as the summary's ``arrayMode``.
* :meth:`NativeArrays.split` takes the due records of one back end and returns the
  native groups to submit, one per array touched: every task of the array that is
  Pending, due, not cancel-requested, not in flight, let go by its dependency (the
  tasks of an array share it) and never tried — read from the store, one query per
  array, so a thousand tasks are one submission, not one per pass's turns — and the
  other records (the one-job-per-task path). A task tried before (a daemon killed
  mid-submission) is looked up first by its uid, which the array's records carry
  (:func:`bridge.arrays.uid_in_array`): adopted if the array reached Slurm (the
  one-job path adopts it), else in a group again, never submitted twice.
* :meth:`NativeArrays.submit` claims each task (attempt 1; one held or cancelled since
  stays out), submits them once (``submit_array``: the first claimed task's request, with
  no task or progress-report variables of its own, and each task's: its bridge id and
  uid, the whole array's ``SLURM_ARRAY_*`` as a task of one job per task is told, and
  where it reports progress), and records each Submitted as ``S_I``. A later part of
  an array (tasks held, or tried, when the rest went) is its own Slurm array with the
  places the throttle ``%N`` has left beside the array's tasks in the back end; while
  there are none its never-tried tasks wait, not due, until a task of the array in
  the back end changes (``ArrayThrottle.park``: no pass reads them meanwhile). A
  refusal fails them all with the back end's reason (one naming the dependency sends
  them back to wait for it, as a dependency that moved does); an unreachable back end,
  a timeout or any other error retries each later (tried: looked up first, never
  submitted twice).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import structlog

from bridge.arrays import NativeTask, array_key, parse_array_key
from bridge.backend import Backend, BackendRejected, BackendUnavailable, SubmitRequest
from bridge.engine_array import ArrayThrottle, array_task, is_native
from bridge.engine_dependency import RETRY_REFUSED, DependencyUnmet, UnreadableDependency
from bridge.engine_request import report_env
from bridge.engine_settings import EngineSettings
from bridge.engine_status import StatusTracker
from bridge.jobid import identity_env, names_own_id
from bridge.model import ValidationError
from bridge.ranges import compress
from bridge.scheduling import SchedulingOptions
from bridge.states import JobState
from bridge.store import JobRecord, Store

__all__ = ["InFlight", "NativeArrays", "NativeSubmitter", "check_native_arrays", "native_mode",
           "slurm_indexes"]

log = structlog.get_logger("hpc_bridge.engine")

class NativeSubmitter(Protocol):
    """A back end that submits native arrays (slurm_adapter/backend.py)."""

    native_arrays: bool

    async def submit_array(self, request: SubmitRequest, key: str, array_id: int,
                           indexes: str, tasks: Sequence[NativeTask]) -> str: ...


def native_mode(backend: object, options: SchedulingOptions, placement_mode: str) -> bool:
    """Whether an array of ``options`` on ``backend`` goes native (module docstring)."""
    dependency = options.dependency or ""
    return (bool(getattr(backend, "native_arrays", False))
            and not any(p and names_own_id(p) for p in (options.output, options.error))
            and "aftercorr" not in dependency and "singleton" not in dependency
            and placement_mode != "nodelist")


@dataclass
class InFlight:
    """The engine's bookkeeping of submissions in flight (bridge/engine.py): the task of
    each job id, the owner of each submission, the users who had due jobs left for a
    later pass, the loop's wake, the slots every submission takes, and the call that
    marks a back end's inventory stale once a submission changed it."""

    tasks: dict[int, asyncio.Task[None]]
    owners: dict[int, int]
    capped: set[int]
    wake: asyncio.Event
    slots: asyncio.Semaphore
    changed: Callable[[str], None]


def check_native_arrays(store: Store, backends: Mapping[str, Backend]) -> None:
    """ValueError (the daemon does not start) for a back end that no longer submits
    native arrays (its ``native_arrays`` turned off) while tasks of its native arrays
    are unfinished: it would no longer read them (their records look like no job of
    its), and they would end ``BackendLost``."""
    for name, backend in backends.items():
        if getattr(backend, "native_arrays", False):
            continue
        left = store.native_unfinished(name)
        if left:
            raise ValueError(f"backends.{name}.native_arrays is off, but {left} tasks of "
                             f"native arrays on it are unfinished: turn it on again until "
                             f"they end (tqueue lists them)")


class NativeArrays:
    """Native arrays' submissions (module docstring). One per engine; the callables are
    the engine's own: the request for a job (no placement decision; with where it
    reports its progress), the retry of a job whose back end is away, and the wait of
    one whose dependency moved."""

    def __init__(self, store: Store, status: StatusTracker,
                 request: Callable[[JobRecord, None, tuple[dict[str, str], dict[str, str]]],
                                   SubmitRequest],
                 retry_later: Callable[[JobRecord, BaseException], None],
                 wait_again: Callable[[JobRecord, str, float], None],
                 settings: EngineSettings, inflight: InFlight, throttle: ArrayThrottle
                 ) -> None:
        self.store = store
        self._status = status
        self._request = request
        self._retry_later = retry_later
        self._wait_again = wait_again
        self.settings = settings
        self._inflight = inflight
        self._throttle = throttle

    def start(self, name: str, backend: Backend, group: list[JobRecord],
              load: Counter[int]) -> None:
        """Start the submission of ``group`` as one of its owner's turns (``load``: the
        submissions of each user in flight this pass); a user with none left waits, as
        for a plain job (bridge/engine.py ``reconcile_once``)."""
        flight = self._inflight
        owner = group[0].owner.uid
        if load[owner] >= self.settings.max_parallel_submits:
            flight.capped.add(owner)
            return
        load[owner] += 1
        flight.owners[group[0].id] = owner
        task = asyncio.create_task(self._run(name, backend, group),
                                   name=f"submit-array-{group[0].array_job_id}")
        for rec in group:
            flight.tasks[rec.id] = task

    async def _run(self, name: str, backend: Backend, group: list[JobRecord]) -> None:
        flight = self._inflight
        try:
            async with flight.slots:
                await self.submit(name, backend, group)
            flight.changed(name)
        except Exception:  # claimed tasks are looked up after submit_timeout, as any
            log.exception("native array submission failed", array_id=group[0].array_job_id)
        finally:
            for rec in group:
                flight.tasks.pop(rec.id, None)
            if flight.owners.pop(group[0].id, None) in flight.capped:
                flight.wake.set()  # this user's next due jobs may go now

    def split(self, backend: Backend, records: Iterable[JobRecord], now: float,
              found: Collection[str]) -> tuple[list[list[JobRecord]], list[JobRecord]]:
        """The native groups to submit to ``backend`` and the other records (module
        docstring); ``found``: the uids of tried records the back end was asked about
        and has as theirs, owner checked (they are adopted, never submitted again; a
        forged record bearing a task's uid does not count). A back end that no longer
        submits native arrays (its setting turned off since) gets every task alone."""
        groups: list[list[JobRecord]] = []
        rest: list[JobRecord] = []
        seen: set[int] = set()
        inflight = self._inflight.tasks
        enabled = bool(getattr(backend, "native_arrays", False))
        records = list(records)
        # Tried before and not in the back end (looked up): submitted again, as never.
        absent = {r.id for r in records if r.attempts > 0 and r.uid not in found}
        for rec in records:
            if (not enabled or not is_native(rec) or rec.cancel_requested
                    or (rec.attempts > 0 and rec.id not in absent)):
                rest.append(rec)
                continue
            array_id = rec.array_job_id
            assert array_id is not None
            if array_id in seen:
                continue
            seen.add(array_id)
            group = [r for r in self.store.by_ids(self.store.array_task_ids(array_id))
                     if r.state is JobState.PENDING and (r.attempts == 0 or r.id in absent)
                     and not r.cancel_requested and r.next_attempt_at <= now
                     and r.id not in inflight]
            if group:
                self._go_or_park(group, groups, now)
        return groups, rest

    def _go_or_park(self, group: list[JobRecord], groups: list[list[JobRecord]],
                    now: float) -> None:
        """Add ``group`` to ``groups``, or park it while its throttle leaves it no place
        (bridge/engine_array.py ``ArrayThrottle.park``: made due when one frees)."""
        places = self._places(group)
        if places != 0:
            groups.append(group)
            return
        task = array_task(group[0])
        assert task is not None and task.spec.limit is not None
        self._throttle.park(group, task.spec.limit, now)

    def _places(self, group: list[JobRecord]) -> int | None:
        """How many of ``group`` its array's throttle lets be in the back end beside the
        array's tasks there (pending ones count), at least 0; None: no throttle."""
        task = array_task(group[0])
        assert task is not None
        if task.spec.limit is None:
            return None
        others = set(self.store.array_in_backend(task.job_id)) - {r.id for r in group}
        return max(task.spec.limit - len(others), 0)

    async def submit(self, name: str, backend: Backend, group: list[JobRecord]) -> None:
        """Submit ``group`` (tasks of one array, by index) as one native array to
        ``backend`` (a :class:`NativeSubmitter`). A later part of an array (tasks held,
        or tried, when the rest went) gets the places its throttle ``%N`` has left
        beside the array's tasks in the back end, and waits while it has none."""
        throttle = self._places(group)
        if throttle == 0:  # the places went since the pass
            task = array_task(group[0])
            assert task is not None and task.spec.limit is not None
            self._throttle.park(group, task.spec.limit, time.time())
            return
        now = time.time()
        claimed = [c for rec in group
                   if (c := self.store.claim_submission(rec.id, rec.attempts,
                                                        submitting_since=now)) is not None]
        if not claimed:
            return
        try:
            await self._send(name, backend, claimed, throttle, now)
        except Exception as exc:  # claimed: looked up before any is submitted again
            log.exception("native array submission failed", array_id=claimed[0].array_job_id)
            for rec in claimed:
                self._retry_later(rec, exc)

    async def _send(self, name: str, backend: Backend, claimed: list[JobRecord],
                    throttle: int | None, now: float) -> None:
        submitter = cast(NativeSubmitter, backend)
        first_task = array_task(claimed[0])
        assert first_task is not None
        key = str(claimed[0].summary.get("arrayKey") or "")
        if parse_array_key(key) is None:  # admitted without it: from the first task
            head = self.store.get(first_task.job_id)
            key = array_key(head.uid, first_task.spec.indexes[0])
        try:
            tasks, request = await self._tasks(backend, claimed)
        except ValidationError as exc:
            for rec in claimed:
                self.store.transition(rec.id, JobState.FAILED, "InvalidJob", str(exc),
                                      submitting_since=None)
            return
        except (DependencyUnmet, UnreadableDependency) as exc:
            for rec in claimed:  # moved since the pass let them go: wait, as never tried
                self._wait_again(rec, str(exc), now)
            return
        indexes = slurm_indexes([t.index for t in tasks]) + (
            f"%{throttle}" if throttle is not None else "")
        try:
            async with asyncio.timeout(self.settings.submit_timeout):
                slurm_id = await submitter.submit_array(request, key, first_task.job_id,
                                                        indexes, tasks)
        except BackendRejected as exc:
            if request.dependency and "dependency" in str(exc).lower():
                for rec in claimed:  # a job it names is gone (purged): decided again
                    self._wait_again(rec, f"{name} refused the dependency "
                                     f"{request.dependency}: {exc}", now + RETRY_REFUSED)
                return
            for rec in claimed:
                self.store.transition(rec.id, JobState.FAILED, "SubmitRejected", str(exc),
                                      submitting_since=None)
            log.warning("back end rejected native array", array_id=first_task.job_id,
                        error=str(exc))
            return
        except (BackendUnavailable, TimeoutError) as exc:
            for rec in claimed:
                self._retry_later(rec, exc)
            return
        for rec, task in zip(claimed, tasks, strict=True):
            backend_id = f"{slurm_id}_{task.index}"
            record = self.store.transition(
                rec.id, JobState.SUBMITTED, "Submitted",
                f"{name} job {backend_id} (native array {slurm_id})",
                backend_id=backend_id, submitting_since=None)
            early = self._status.early.pop(rec.uid, None)  # seen before it was recorded
            if early is not None and early.backend_id == backend_id:
                self._status.apply_one(record, early)
        log.info("native array submitted", array_id=first_task.job_id, backend=name,
                 backend_id=slurm_id, tasks=len(claimed))

    async def _tasks(self, backend: Backend, claimed: list[JobRecord]
                     ) -> tuple[list[NativeTask], SubmitRequest]:
        """Each claimed task's index and variables, and the request every task runs."""
        tasks: list[NativeTask] = []
        request: SubmitRequest | None = None
        for rec in claimed:
            # The token file may sit on a network file system: off the loop.
            report = await asyncio.to_thread(report_env, rec, self.settings.status_reports,
                                             backend)
            req = self._request(rec, None, report)
            if request is None:  # each task's own variables go in the prologue only
                request = dataclasses.replace(req, array=None, status_env={})
            task = array_task(rec)
            assert task is not None
            # As a task of one job per task is told (bridge/jobid.py): the whole
            # array's SLURM_ARRAY_* even when only a part goes in this submission.
            tasks.append(NativeTask(task.index, {**identity_env(rec.id, rec.uid, task),
                                                 **report[0]}))
        assert request is not None
        return tasks, request


def slurm_indexes(indexes: Sequence[int]) -> str:
    """sbatch's ``--array`` text for ``indexes`` (sorted): ``A-B:S`` when they are evenly
    spaced by more than one (Slurm tells the tasks that step, ``SLURM_ARRAY_TASK_STEP``,
    from the text, as it does for sbatch's own ``1-7:2``), else ranges and single
    indexes."""
    gaps = {b - a for a, b in itertools.pairwise(indexes)}
    if len(gaps) == 1 and (step := gaps.pop()) > 1:
        return f"{indexes[0]}-{indexes[-1]}:{step}"
    return compress(indexes)
