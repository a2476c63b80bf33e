"""The engine's side of job arrays (bridge/arrays.py): a task's :class:`ArrayTask`, and
the throttle ``%N``.

Contract:

* Tasks of an array admitted as native (:func:`is_native`,
  bridge/engine_native_array.py) are not held by :meth:`ArrayThrottle.split`: their
  back end throttles them; only a later part with no place left waits here
  (:meth:`ArrayThrottle.park`, below).
* :func:`array_task` is a stored task's :class:`ArrayTask` (its array read from the
  record's summary, no document decoded); None for a plain job.
* Admission stores the tasks past the throttle Pending, reason ``JobArrayTaskLimit``
  (:data:`THROTTLED`, as squeue shows it) and not due.
* :meth:`ArrayThrottle.split` takes the due jobs and returns those that may go to their
  back end: a task of a throttled array goes only while fewer than N of its array's
  tasks are in their back end (Submitted, Running, or Pending with a submission tried:
  :meth:`bridge.store.Store.array_in_backend`); the others wait as above.
* After its decisions, and whenever :meth:`ArrayThrottle.changed` hears (from the
  outbox, through :meth:`bridge.engine_dependency.DependencyGate.wake`) that the state
  of a task it counted changed (it ended, or was held), an array is looked at once: as
  many waiting tasks as there are free places are made due, lowest index first. A task
  let go counts while its submission is in flight (the engine's ``inflight``), before
  its back end has it. A pass costs one or two
  indexed statements per array touched and one per task let go, never one per waiting
  task. After a restart, and every :data:`RECHECK` seconds as a backstop, every array
  with a waiting task is looked at (one query).
* :meth:`ArrayThrottle.park` is the same wait for a later part of a native array that
  has no place left under its throttle (held or released tasks, after the rest went):
  its never-tried tasks wait as above, and once a place frees *every* waiting task of
  the array is made due, to go as one native array with the places left (Slurm
  throttles it), instead of being read again on every pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import lru_cache

import structlog

from bridge.arrays import MAX_ARRAY_SIZE, THROTTLED, ArraySpec, ArrayTask, parse
from bridge.states import JobState
from bridge.store import JobRecord, Store
from bridge.store_arrays import NOT_DUE

__all__ = ["NATIVE", "RECHECK", "THROTTLED", "ArrayThrottle", "array_task", "is_native"]

log = structlog.get_logger("hpc_bridge.engine")

#: Every array with a waiting task is looked at again at least this often (seconds).
RECHECK = 600.0
#: The summary's ``arrayMode`` of an array admitted as one native Slurm array
#: (bridge/engine_native_array.py): its back end throttles it, not this module.
NATIVE = "native"


@lru_cache(maxsize=256)
def _spec(text: str) -> ArraySpec:
    return parse(text)


def is_native(rec: JobRecord) -> bool:
    """Whether ``rec`` is a task of an array admitted as native."""
    return rec.array_job_id is not None and rec.summary.get("arrayMode") == NATIVE


def array_task(rec: JobRecord) -> ArrayTask | None:
    """The task of an array ``rec`` is, or None for a plain job (module docstring)."""
    if rec.array_job_id is None or rec.array_task_id is None:
        return None
    text = rec.summary.get("array")
    try:
        spec = _spec(str(text)) if text else ArraySpec((rec.array_task_id,))
    except ValueError:  # admission checked it; never let one row stop the pass
        log.warning("stored array unreadable", job_id=rec.id, array=str(text)[:80])
        spec = ArraySpec((rec.array_task_id,))
    return ArrayTask(rec.array_job_id, rec.array_task_id, spec)


class ArrayThrottle:
    """The throttle of every array (module docstring). One per engine."""

    def __init__(self, store: Store,
                 inflight: Callable[[], Collection[int]] = frozenset) -> None:
        self.store = store
        #: The ids whose submission the engine has started and not finished: a task let
        #: go is one of them (Pending, never tried) until its back end has it.
        self._inflight = inflight
        #: array job id -> the tasks let go and maybe still in flight.
        self._let: dict[int, set[int]] = {}
        #: array job id -> its throttle, the ids of its tasks in their back end and
        #: whether it is native, for the arrays with a waiting task: what a start or end
        #: must be matched against.
        self._watch: dict[int, tuple[int, set[int], bool]] = {}
        self._next_sweep = 0.0

    @property
    def watching(self) -> bool:
        """Whether any array waits for a task to start or end."""
        return bool(self._watch)

    def changed(self, job_ids: set[int], now: float) -> None:
        """The states of ``job_ids`` changed (a task started, ended, was held or went
        back to Pending): look again at the arrays they are in (and at every waiting
        array after a restart and each :data:`RECHECK`)."""
        if now >= self._next_sweep:
            self._next_sweep = now + RECHECK
            for array_id in self.store.arrays_waiting(THROTTLED):
                limit, native = self._limit(array_id)
                if limit is not None:
                    self._look(array_id, limit, self._in_backend(array_id), now, native)
            return
        for array_id, (limit, ids, native) in list(self._watch.items()):
            if ids & job_ids:
                self._look(array_id, limit, self._in_backend(array_id), now, native)

    def _in_backend(self, array_id: int) -> set[int]:
        """The array's tasks in their back end, or on their way there (let go by this
        throttle, their submission in flight)."""
        let = self._let.get(array_id, set()) & set(self._inflight())
        if let:
            self._let[array_id] = let
        else:
            self._let.pop(array_id, None)
        return set(self.store.array_in_backend(array_id)) | let

    def split(self, records: Iterable[JobRecord], now: float | None = None
              ) -> list[JobRecord]:
        """The records that may be submitted now; the others wait (module docstring)."""
        now = time.time() if now is None else now
        ready: list[JobRecord] = []
        touched: dict[int, tuple[int, set[int]]] = {}
        for rec in records:
            task = array_task(rec)
            limit = task.spec.limit if task is not None else None
            if (task is None or limit is None or rec.attempts > 0 or rec.cancel_requested
                    or is_native(rec)):
                ready.append(rec)
                continue
            entry = touched.get(task.job_id)
            if entry is None:
                entry = touched[task.job_id] = (limit, self._in_backend(task.job_id))
            ids = entry[1]
            if rec.id in ids or len(ids) < limit:
                ids.add(rec.id)
                self._let.setdefault(task.job_id, set()).add(rec.id)
                ready.append(rec)
            else:
                self._wait(rec, task.job_id, limit)
        for array_id, (limit, ids) in touched.items():
            self._look(array_id, limit, ids, now)
        return ready

    def park(self, group: Sequence[JobRecord], limit: int, now: float) -> None:
        """``group``, tasks of one native array due and with no place left under its
        throttle ``limit``, waits (module docstring). A task tried before stays due: it
        is looked up again on each pass anyway."""
        array_id = group[0].array_job_id
        assert array_id is not None
        for rec in group:
            if rec.attempts == 0:
                self._wait(rec, array_id, limit)
        self._look(array_id, limit, self._in_backend(array_id), now, native=True)

    def _wait(self, rec: JobRecord, array_id: int, limit: int) -> None:
        if rec.reason != THROTTLED:
            self.store.transition(rec.id, JobState.PENDING, THROTTLED,
                                  _message(array_id, limit), next_attempt_at=NOT_DUE)
        else:
            self.store.update(rec.id, next_attempt_at=NOT_DUE)

    def _look(self, array_id: int, limit: int, in_backend: set[int], now: float,
              native: bool = False) -> None:
        """Make as many waiting tasks due as the array has free places (a native
        array's: all of them, once it has one); remember what to watch while it has
        waiting tasks."""
        free = limit - len(in_backend)
        count = MAX_ARRAY_SIZE if native else max(free, 0) + len(in_backend) + 1
        waiting = [i for i in self.store.waiting_tasks(array_id, count, THROTTLED)
                   if i not in in_backend]
        if not waiting:
            self._watch.pop(array_id, None)
            return
        woken = waiting if native and free > 0 else waiting[:max(free, 0)]
        # Also watch the tasks made due: one held or ended by its dependency before it
        # reaches its back end frees its place again.
        self._watch[array_id] = (limit, in_backend | set(woken), native)
        for job_id in woken:
            self.store.update(job_id, next_attempt_at=now)

    def _limit(self, array_id: int) -> tuple[int | None, bool]:
        """The array's throttle (None: none, or no task) and whether it is native."""
        ids = self.store.array_task_ids(array_id)
        if not ids:
            return None, False
        first = self.store.get(ids[0])
        task = array_task(first)
        return (task.spec.limit if task is not None else None), is_native(first)


def _message(array_id: int, limit: int) -> str:
    return (f"array {array_id} has {limit} task{'s' if limit != 1 else ''} in its back end, "
            f"its limit (--array=...%{limit})")
