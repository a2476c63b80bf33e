"""The engine's hold on jobs whose ``--dependency`` is not met (bridge/dependency.py).

Contract:

* :meth:`DependencyGate.split` takes the Pending jobs that are due and returns those
  that may go to their back end: no dependency, or one that is met. The others stay
  Pending, reason ``Dependency`` (or ``DependencyNeverSatisfied``, as Slurm shows it),
  and are not due again until something they wait on changes. With
  ``--kill-on-invalid-dep=yes`` a never-satisfiable job is cancelled instead, reason
  ``DependencyNeverSatisfied``.
* :meth:`DependencyGate.wake` (once per engine pass, before the due jobs are read)
  makes a held job due again when the outbox shows a job it waits on start or end (a
  resumed or released job is due at once: the engine sets it so). It costs one
  ``max(rowid)`` when nothing changed, and otherwise the new outbox rows: a pass costs
  what changed, not what is held. A held job is also due again after :data:`RECHECK`
  seconds whatever happens (a backstop), and at the time an ``after:ID+MIN`` is met.
  At most :data:`CHECKS_PER_PASS` held jobs are looked at per pass; ``singleton``
  reads each user's unfinished jobs once per pass.
* **--begin** where the back end reads none (the summary's ``beginAt``: Kubernetes,
  Flux): a job never tried is held Pending, reason ``BeginTime`` as squeue shows it,
  and not due until then; its dependency is looked at after that.
* After a restart the held jobs are found again by their reason (one query, on the
  first pass): the hold lives in the store, nothing is lost with the process.
* **Native dependencies.** For a back end in ``native_backends`` (Slurm), a job whose
  dependency is not met but names only jobs already in that same back end (each with
  its back-end id: a job, or one task ``A_I``; not a whole array, not ``singleton``)
  is not held: :meth:`DependencyGate.split` lets it go, and
  :meth:`DependencyGate.native` gives the dependency in the back end's own ids (the
  conditions already met left out) for its submission, so Slurm queues it with the
  dependency and starts it itself. ``native`` is computed again at every attempt
  from the store, so a retry after a crash hands over what is true then; a job whose
  dependency can no longer be handed over raises :class:`DependencyUnmet` (the
  engine puts it back to wait, as never tried: nothing reached the back end). Not
  handed over: ``singleton`` (Slurm cannot see the bridge's held jobs of that name),
  and anything while the back end's status has not been read since this start
  (``confirmed``: a job the store calls live may have ended and been purged); the
  jobs held meanwhile are due again once it has been read (:meth:`wake`).
  As before, a job tried once (``attempts`` > 0) passes the gate: the engine looks it
  up in its back end first, and only if it is not there works out ``native`` again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import structlog

from bridge.dependency import (
    Condition,
    Dependency,
    Facts,
    Verdict,
    combine,
    evaluate,
    parse,
    unmet,
)
from bridge.errors import BridgeError
from bridge.model import ANN_SCHEDULING, ValidationError
from bridge.states import LIVE, JobState
from bridge.store import JobRecord, Store

__all__ = ["DEPENDENCY", "NEVER_SATISFIED", "RECHECK", "DependencyGate", "DependencyUnmet",
           "check_dependency_ids"]

log = structlog.get_logger("hpc_bridge.engine")

#: Reasons of a held job (squeue's).
DEPENDENCY = "Dependency"
NEVER_SATISFIED = "DependencyNeverSatisfied"
#: A held job is looked at again at least this often (seconds).
RECHECK = 3600.0

_IN_BACKEND = frozenset({JobState.SUBMITTED, JobState.RUNNING})
#: Outbox transitions that can release a held job: a start (``after``) or an end.
_RELEASING = frozenset({"Running", "Succeeded", "Failed", "Cancelled"})
#: ... and, for a job of a back end with native dependencies, reaching the back end
#: (a native dependency may name it now).
_ARRIVING = "Submitted"
#: At most this many dependency checks per pass (the rest stay due for the next one),
#: so that no user's held jobs keep the loop from everyone else's work for long.
CHECKS_PER_PASS = 200


#: Seconds before a job whose dependency its back end refused is looked at again.
RETRY_REFUSED = 60.0


class UnreadableDependency(BridgeError):
    """A stored dependency that no longer parses (admission checked it)."""


class DependencyUnmet(BridgeError):
    """A job about to be submitted whose dependency is neither met nor expressible in
    its back end's ids: it must wait in the bridge again."""


def dependency_of(rec: JobRecord) -> tuple[Dependency, bool] | None:
    """The job's dependency and ``--kill-on-invalid-dep``, from its summary (no document
    decoded); None without one. :class:`UnreadableDependency` when the stored text no
    longer parses: the job is held, never run as if it had none."""
    text = rec.summary.get("dependency")
    if not text:
        return None
    try:
        return parse(str(text)), bool(rec.summary.get("killOnInvalidDep"))
    except ValueError as exc:
        raise UnreadableDependency(f"stored dependency {str(text)[:80]!r} unreadable: "
                                   f"{exc}") from None


class _Singletons:
    """One pass's view of a user's unfinished jobs by job name (read once per user per
    pass): what blocks a ``singleton``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._by_user: dict[int, dict[str, tuple[list[int], list[int]]]] = {}

    def blockers(self, rec: JobRecord) -> list[int]:
        """As Slurm's: an earlier unfinished job with the same user and name, or one in
        its back end (Submitted, Running) whatever its id. Only the nearest of each kind
        is returned: the one whose end can change the answer next."""
        groups = self._by_user.get(rec.owner.uid)
        if groups is None:
            groups = {}
            for r in self.store.list_jobs(list(LIVE), user=rec.owner.user):
                if r.owner.uid != rec.owner.uid:
                    continue
                waiting, running = groups.setdefault(_name(r), ([], []))
                (running if r.state in _IN_BACKEND else waiting).append(r.id)
            self._by_user[rec.owner.uid] = groups
        waiting, running = groups.get(_name(rec), ([], []))
        earlier = [i for i in waiting if i < rec.id]
        return ([max(earlier)] if earlier else []) + [i for i in running if i != rec.id][:1]


def _name(rec: JobRecord) -> str:
    return str(rec.summary.get("jobName") or rec.name)


def check_dependency_ids(store: Store, summary: Mapping[str, Any]) -> None:
    """At admission: every job a new job's dependency names exists (sbatch refuses the
    job otherwise: "Job dependency problem"); :class:`ValidationError` naming the first
    missing one."""
    text = summary.get("dependency")
    if not text:
        return
    dep = parse(str(text))
    ids = sorted(dep.job_ids())
    found = {r.id for r in store.by_ids(ids)}
    missing = [str(i) for i in ids if i not in found] + [
        f"{c.job_id}_{c.task}" for c in dep.conditions
        if c.task is not None and store.task_id(c.job_id, c.task) is None]
    if missing:
        raise ValidationError([(f"metadata.annotations[{ANN_SCHEDULING}].dependency",
                                f"job {missing[0]} does not exist (Job dependency problem)")])


class _Known:
    """One pass's facts of the jobs dependencies name (each read once a pass), of the
    arrays named by their id (each combined once a pass), and of task ids."""

    def __init__(self) -> None:
        self.facts: dict[int, Facts | None] = {}
        self.heads: dict[int, bool] = {}
        self.arrays: dict[int, Facts | None] = {}
        self.tasks: dict[tuple[int, int], int | None] = {}
        #: job id -> (back end, back-end id) of a job in its back end (Submitted,
        #: Running): what a native dependency may name.
        self.homes: dict[int, tuple[str, str]] = {}

    def task_id(self, array_id: int, index: int, store: Store) -> int | None:
        key = (array_id, index)
        if key not in self.tasks:
            self.tasks[key] = store.task_id(array_id, index)
        return self.tasks[key]

    def job_or_array(self, job_id: int, store: Store) -> tuple[Facts | None, frozenset[int]]:
        """The facts of job ``job_id`` and ``{job_id}`` to watch; for an array's id,
        its tasks' facts combined and ``{-job_id}``."""
        own = self.facts_of([job_id], store).get(job_id)
        if own is None or not self.heads.get(job_id):
            return own, frozenset({job_id}) if own is not None else frozenset()
        if job_id not in self.arrays:
            self.arrays[job_id] = array_facts(store, job_id)
        return self.arrays[job_id], frozenset({-job_id})

    def facts_of(self, ids: Sequence[int], store: Store) -> dict[int, Facts]:
        """The facts of the jobs ``ids`` (read once a pass; a purged job has none)."""
        unread = sorted({i for i in ids if i not in self.facts})
        if unread:
            self.facts.update(dict.fromkeys(unread))
            for r in store.by_ids(unread):
                self.facts[r.id] = Facts(r.state.value, r.started_at)
                self.heads[r.id] = r.array_job_id == r.id
                if r.state in _IN_BACKEND and r.backend_id:
                    self.homes[r.id] = (r.backend, r.backend_id)
        return {i: f for i in ids if (f := self.facts.get(i)) is not None}


def array_facts(store: Store, array_id: int) -> Facts | None:
    """The combined facts of every task of array ``array_id`` (bridge.dependency)."""
    return combine([Facts(r.state.value, r.started_at)
                    for r in store.by_ids(store.array_task_ids(array_id))])


#: squeue's reason for a job that waits for its ``--begin``.
BEGIN_TIME = "BeginTime"


def _local(epoch: float) -> str:
    """A time as Slurm prints one (``2026-12-07T10:00:00``, local time); the number
    itself when it is none (a row written before the bound)."""
    try:
        return datetime.fromtimestamp(epoch).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):
        return f"{epoch:.0f}"


class DependencyGate:
    def __init__(self, store: Store, native_backends: Iterable[str] = (),
                 confirmed: Callable[[str], bool] = lambda backend: True) -> None:
        self.store = store
        #: Back ends that take a dependency in their own ids (module docstring).
        self.native_backends = frozenset(native_backends)
        #: Whether a back end's whole status was read since this start (its jobs'
        #: states in the store are then the world's, not last run's).
        self.confirmed = confirmed
        #: held job id -> the job ids whose start or end may release it (``-A``: array
        #: A's combined facts, bridge.engine_dependency.array_facts).
        self._held: dict[int, frozenset[int]] = {}
        #: The held jobs of back ends in :attr:`native_backends`, and their back ends.
        self._native_held: dict[int, str] = {}
        #: The native back ends whose first whole status this gate has seen.
        self._confirmed: set[str] = set()
        #: The combined facts last seen of each watched array.
        self._arrays: dict[int, Facts | None] = {}
        self._seen = store.last_event_id()
        self._restored = False

    def wake(self, now: float, wanted: bool = False) -> set[int]:
        """Make held jobs due again whose awaited jobs changed (module docstring), and
        answer the ids of the jobs whose state changed since the last call (read only
        when a job is held or ``wanted``: else empty)."""
        if not self._restored:
            self._restored = True
            for rec in self.store.list_jobs([JobState.PENDING]):
                if rec.reason in (DEPENDENCY, NEVER_SATISFIED):
                    self.store.update(rec.id, next_attempt_at=now)
        for backend in self.native_backends - self._confirmed:
            if self.confirmed(backend):  # once per back end: jobs held only for want of it
                self._confirmed.add(backend)
                for job_id in [j for j, b in self._native_held.items() if b == backend]:
                    self._release(job_id)
                    self.store.update(job_id, next_attempt_at=now)
        newest = self.store.last_event_id()
        if newest <= self._seen:
            return set()
        if not self._held and not wanted:
            self._seen = newest
            return set()
        changed: set[int] = set()
        arrived: set[int] = set()
        moved: set[int] = set()
        heads = {-w for watched in self._held.values() for w in watched if w < 0}
        arrays: set[int] = set()
        while self._seen < newest:
            rows = self.store.events_after(self._seen, 1000, upto=newest)
            if not rows:
                break
            for e in rows:
                if "to" not in e.payload:  # a progress report: the job did not move
                    continue
                moved.add(e.job_id)
                if e.payload.get("to") in _RELEASING:
                    changed.add(e.job_id)
                    if e.payload.get("arrayJobId") in heads:
                        arrays.add(e.payload["arrayJobId"])
                elif e.payload.get("to") == _ARRIVING and self._native_held:
                    arrived.add(e.job_id)
            self._seen = rows[-1].id
        self._seen = newest
        # A task's start or end wakes what waits for its whole array only when the
        # array's combined facts change (its first start, its last end, ...): not a
        # thousand checks of a thousand held tasks for each task that ends.
        self._arrays = {a: f for a, f in self._arrays.items() if a in heads}
        for array_id in arrays:
            facts = array_facts(self.store, array_id)
            if array_id not in self._arrays or facts != self._arrays[array_id]:
                self._arrays[array_id] = facts
                changed.add(-array_id)
        for job_id, watched in list(self._held.items()):
            if watched & changed or (job_id in self._native_held and watched & arrived):
                del self._held[job_id]
                self._native_held.pop(job_id, None)
                self.store.update(job_id, next_attempt_at=now)
        return moved

    def split(self, records: Iterable[JobRecord], now: float | None = None) -> list[JobRecord]:
        """The records that may be submitted now; holds (or ends) the others."""
        now = time.time() if now is None else now
        ready = []
        checks = 0
        singletons = _Singletons(self.store)
        known = _Known()  # one pass's facts: each job read once
        for rec in records:
            try:
                if self._before_begin(rec, now):
                    continue
            except Exception:  # one job's data must never stop the pass for the others
                log.exception("--begin hold failed; looking again later", job_id=rec.id)
                self.store.update(rec.id, next_attempt_at=now + 60)
                continue
            try:
                # A job tried once may be in its back end already: the engine looks it
                # up first, and works out its dependency afresh (native) if it is not.
                dep = dependency_of(rec) if rec.attempts == 0 else None
            except UnreadableDependency as exc:
                self._hold(rec, NEVER_SATISFIED, str(exc), now + RECHECK, frozenset())
                continue
            if dep is None or rec.cancel_requested:
                self._release(rec.id)
                ready.append(rec)
                continue
            checks += 1
            if checks > CHECKS_PER_PASS:
                continue  # still due: the next pass looks at it
            try:
                if self._check(rec, *dep, now, singletons, known):
                    ready.append(rec)
            except Exception:  # one job's data must never stop the pass for the others
                log.exception("dependency check failed; looking again later", job_id=rec.id)
                self.store.update(rec.id, next_attempt_at=now + 60)
        return ready

    def _before_begin(self, rec: JobRecord, now: float) -> bool:
        """Hold ``rec`` until its ``--begin`` where its back end reads none (the
        summary's ``beginAt``); whether it is held."""
        begin = rec.summary.get("beginAt")
        if not begin or rec.attempts > 0 or rec.cancel_requested or float(begin) <= now:
            return False
        self._hold(rec, BEGIN_TIME, f"held until {_local(float(begin))} (--begin)",
                   float(begin), frozenset())
        return True

    def _named(self, cond: Condition, rec: JobRecord, known: _Known
               ) -> tuple[Facts | None, frozenset[int]]:
        """The facts of what a condition names, and what to watch for it: the job; task
        I of ``A_I``; for ``aftercorr`` the task of the dependent task's index; every
        task of an array named by its id (watched as ``-A``: :meth:`wake` says when
        the array's combined facts change, not each task's)."""
        task = cond.task
        if cond.kind == "aftercorr" and rec.array_task_id is not None:
            task = rec.array_task_id
        if task is not None:
            found = known.task_id(cond.job_id, task, self.store)
            if found is not None or cond.kind != "aftercorr":
                if found is None:
                    return None, frozenset()
                return known.facts_of([found], self.store).get(found), frozenset({found})
        return known.job_or_array(cond.job_id, self.store)

    def _facts(self, rec: JobRecord, dep: Dependency, known: _Known
               ) -> tuple[dict[Hashable, Facts], dict[Condition, frozenset[int]]]:
        """The facts under each condition's key, and what each condition watches."""
        facts: dict[Hashable, Facts] = {}
        watched: dict[Condition, frozenset[int]] = {}
        for cond in dep.conditions:
            if cond.kind == "singleton":
                continue
            found, watch = self._named(cond, rec, known)
            if found is not None:
                facts[cond.key] = found
                watched[cond] = watch
                for w in watch:
                    if w < 0:  # what wake compares the array's next facts with
                        self._arrays.setdefault(-w, found)
        return facts, watched

    def _native_text(self, rec: JobRecord, dep: Dependency, facts: Mapping[Hashable, Facts],
                     watched: Mapping[Condition, frozenset[int]], known: _Known,
                     now: float, blockers: Sequence[int]) -> str | None:
        """The unmet part of ``dep`` in the back end's own ids, or None when it names
        something that back end does not hold (module docstring); ``""`` when met."""
        verdict, left = unmet(dep, facts, now, blockers)
        if verdict is Verdict.READY:
            return ""
        # singleton: the bridge's held jobs of that name are not Slurm's to see, and a
        # later one may reach Slurm first; the bridge keeps it. A back end whose status
        # is not confirmed since this start may have purged what the store calls live.
        if (rec.backend not in self.native_backends or dep.singleton
                or not self.confirmed(rec.backend)):
            return None
        terms = []
        for cond in left:
            ids = watched.get(cond, frozenset())
            home = known.homes.get(next(iter(ids))) if len(ids) == 1 else None
            if home is None or home[0] != rec.backend:
                return None
            kind = "afterok" if cond.kind == "aftercorr" else cond.kind  # one task's
            terms.append(f"{kind}:{home[1]}"
                         + (f"+{cond.delay_minutes}" if cond.delay_minutes else ""))
        return ("?" if dep.any_of else ",").join(terms)

    def native(self, rec: JobRecord) -> str | None:
        """For a job about to be submitted: its dependency in its back end's ids (read
        afresh from the store), or None when it has none or it is met. Raises
        :class:`DependencyUnmet` when it is not met and cannot be handed over, and
        :class:`UnreadableDependency` when the stored text no longer parses."""
        parsed = dependency_of(rec)
        if parsed is None:
            return None
        dep = parsed[0]
        known = _Known()
        facts, watched = self._facts(rec, dep, known)
        now = time.time()
        blockers = _Singletons(self.store).blockers(rec) if dep.singleton else []
        text = self._native_text(rec, dep, facts, watched, known, now, blockers)
        if text is None:
            raise DependencyUnmet(f"dependency {dep.text()} is not met")
        return text or None

    def _check(self, rec: JobRecord, dep: Dependency, kill: bool, now: float,
               singletons: _Singletons, known: _Known) -> bool:
        facts, watched = self._facts(rec, dep, known)
        named = {w for watch in watched.values() for w in watch}
        blockers = singletons.blockers(rec) if dep.singleton else []
        verdict, at = evaluate(dep, facts, now, blockers)
        if verdict is Verdict.READY:
            self._release(rec.id)
            if rec.reason in (DEPENDENCY, NEVER_SATISFIED):
                self.store.transition(rec.id, JobState.PENDING, "DependencyMet",
                                      f"dependency {dep.text()} met")
            return True
        if (verdict is Verdict.WAIT and rec.backend in self.native_backends
                and self._native_text(rec, dep, facts, watched, known, now, blockers)):
            self._release(rec.id)  # its back end holds it (module docstring)
            return True
        if verdict is Verdict.NEVER and kill:
            self._release(rec.id)
            self.store.transition(rec.id, JobState.CANCELLED, NEVER_SATISFIED,
                                  f"dependency {dep.text()} can never be satisfied "
                                  f"(--kill-on-invalid-dep)")
            log.info("job cancelled: dependency never satisfied", job_id=rec.id)
            return False
        if verdict is Verdict.NEVER:
            self._hold(rec, NEVER_SATISFIED, f"dependency {dep.text()} can never be satisfied",
                       now + RECHECK, frozenset())
        else:
            due = min(at, now + RECHECK) if at is not None else now + RECHECK
            self._hold(rec, DEPENDENCY, f"waiting for dependency {dep.text()}", due,
                       frozenset({*named, *blockers}))
        return False

    def _release(self, job_id: int) -> None:
        self._held.pop(job_id, None)
        self._native_held.pop(job_id, None)

    def _hold(self, rec: JobRecord, reason: str, message: str, due: float,
              watched: frozenset[int]) -> None:
        """Keep ``rec`` Pending with ``reason`` until ``due`` or a change of ``watched``."""
        if watched:
            self._held[rec.id] = watched
            if rec.backend in self.native_backends:
                self._native_held[rec.id] = rec.backend
        else:
            self._release(rec.id)
        if (rec.reason, rec.message) != (reason, message):
            self.store.transition(rec.id, JobState.PENDING, reason, message[:1024],
                                  next_attempt_at=due)
        else:
            self.store.update(rec.id, next_attempt_at=due)
