"""The engine's hold on jobs whose ``--dependency`` is not met (bridge/dependency.py).

Contract:

* :meth:`DependencyGate.split` takes the Pending jobs that are due and returns those
  that may go to their back end: no dependency, or one that is met. The others stay
  Pending, reason ``Dependency`` (or ``DependencyNeverSatisfied``, as Slurm shows it),
  and are not due again until something they wait on changes. With
  ``--kill-on-invalid-dep=yes`` a never-satisfiable job is cancelled instead, reason
  ``DependencyNeverSatisfied``.
* :meth:`DependencyGate.wake` (once per engine pass, before the due jobs are read)
  makes a held job due again when the outbox shows a change of a job it waits on, or of
  itself (a resume). It costs one ``max(rowid)`` when nothing changed, and otherwise
  the new outbox rows: a pass costs what changed, not what is held. A held job is also
  due again after :data:`RECHECK` seconds whatever happens (a backstop), and at the
  time an ``after:ID+MIN`` is met.
* After a restart the held jobs are found again by their reason (one query, on the
  first pass): the hold lives in the store, nothing is lost with the process.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from bridge.dependency import Dependency, Facts, Verdict, evaluate, parse
from bridge.model import ANN_SCHEDULING, ValidationError
from bridge.states import JobState
from bridge.store import JobRecord, Store

__all__ = ["DEPENDENCY", "NEVER_SATISFIED", "RECHECK", "DependencyGate", "check_dependency_ids"]

log = structlog.get_logger("hpc_bridge.engine")

#: Reasons of a held job (squeue's).
DEPENDENCY = "Dependency"
NEVER_SATISFIED = "DependencyNeverSatisfied"
#: A held job is looked at again at least this often (seconds).
RECHECK = 3600.0

_UNFINISHED = [JobState.PENDING, JobState.SUSPENDED, JobState.SUBMITTED, JobState.RUNNING]


def dependency_of(rec: JobRecord) -> tuple[Dependency, bool] | None:
    """The job's dependency and ``--kill-on-invalid-dep``, from its summary (no document
    decoded); None without one, or when the stored text no longer parses (logged: the
    job then runs, as admission checked it)."""
    text = rec.summary.get("dependency")
    if not text:
        return None
    try:
        return parse(str(text)), bool(rec.summary.get("killOnInvalidDep"))
    except ValueError as exc:
        log.warning("stored dependency unreadable; ignoring it", job_id=rec.id,
                    error=str(exc))
        return None


def check_dependency_ids(store: Store, summary: Mapping[str, Any]) -> None:
    """At admission: every job a new job's dependency names exists (sbatch refuses the
    job otherwise: "Job dependency problem"); :class:`ValidationError` naming the first
    missing one."""
    text = summary.get("dependency")
    if not text:
        return
    ids = sorted(parse(str(text)).job_ids())
    found = {r.id for r in store.by_ids(ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise ValidationError([(f"metadata.annotations[{ANN_SCHEDULING}].dependency",
                                f"job {missing[0]} does not exist (Job dependency problem)")])


class DependencyGate:
    def __init__(self, store: Store) -> None:
        self.store = store
        #: held job id -> the job ids whose change may release it (itself included).
        self._held: dict[int, frozenset[int]] = {}
        self._seen = store.last_event_id()
        self._restored = False

    def wake(self, now: float) -> None:
        """Make held jobs due again whose awaited jobs changed (module docstring)."""
        if not self._restored:
            self._restored = True
            for rec in self.store.list_jobs([JobState.PENDING]):
                if rec.reason in (DEPENDENCY, NEVER_SATISFIED):
                    self.store.update(rec.id, next_attempt_at=now)
        newest = self.store.last_event_id()
        if newest <= self._seen:
            return
        if not self._held:
            self._seen = newest
            return
        changed: set[int] = set()
        while self._seen < newest:
            rows = self.store.events_after(self._seen, 1000, upto=newest)
            if not rows:
                break
            changed.update(e.job_id for e in rows)
            self._seen = rows[-1].id
        self._seen = newest
        for job_id, watched in list(self._held.items()):
            if watched & changed:
                del self._held[job_id]
                self.store.update(job_id, next_attempt_at=now)

    def split(self, records: Iterable[JobRecord], now: float | None = None) -> list[JobRecord]:
        """The records that may be submitted now; holds (or ends) the others."""
        now = time.time() if now is None else now
        ready = []
        for rec in records:
            # A job tried once may be in its back end already: its dependency was met.
            dep = dependency_of(rec) if rec.attempts == 0 else None
            if dep is None or rec.cancel_requested:
                self._held.pop(rec.id, None)
                ready.append(rec)
                continue
            if self._check(rec, *dep, now):
                ready.append(rec)
        return ready

    def _check(self, rec: JobRecord, dep: Dependency, kill: bool, now: float) -> bool:
        named = {r.id: r for r in self.store.by_ids(sorted(dep.job_ids()))}
        facts = {i: Facts(r.state.value, r.started_at) for i, r in named.items()}
        blockers: list[int] = []
        if dep.singleton:
            name = rec.summary.get("jobName") or rec.name
            blockers = [r.id for r in self.store.list_jobs(_UNFINISHED, user=rec.owner.user)
                        if r.id < rec.id and r.owner.uid == rec.owner.uid
                        and (r.summary.get("jobName") or r.name) == name]
        verdict, at = evaluate(dep, facts, now, blockers)
        if verdict is Verdict.READY:
            self._held.pop(rec.id, None)
            if rec.reason in (DEPENDENCY, NEVER_SATISFIED):
                self.store.transition(rec.id, JobState.PENDING, "DependencyMet",
                                      f"dependency {dep.text()} met")
            return True
        if verdict is Verdict.NEVER and kill:
            self._held.pop(rec.id, None)
            self.store.transition(rec.id, JobState.CANCELLED, NEVER_SATISFIED,
                                  f"dependency {dep.text()} can never be satisfied "
                                  f"(--kill-on-invalid-dep)")
            log.info("job cancelled: dependency never satisfied", job_id=rec.id)
            return False
        reason = NEVER_SATISFIED if verdict is Verdict.NEVER else DEPENDENCY
        message = (f"dependency {dep.text()} can never be satisfied" if verdict is Verdict.NEVER
                   else f"waiting for dependency {dep.text()}")
        due = min(at, now + RECHECK) if at is not None else now + RECHECK
        self._held[rec.id] = frozenset({rec.id, *named, *blockers})
        if (rec.reason, rec.message) != (reason, message):
            self.store.transition(rec.id, JobState.PENDING, reason, message,
                                  next_attempt_at=due)
        else:
            self.store.update(rec.id, next_attempt_at=due)
        return False
