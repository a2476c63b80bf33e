"""Suspend, resume, hold and release one job: :meth:`bridge.engine.Engine.set_suspend`.

Contract (:func:`set_suspend`): only the job's owner or root may
(:class:`~bridge.errors.PermissionDenied`). Before its back end the job just waits:
Pending ↔ Suspended, the state and the stored document (``spec.suspend``) changing in
one transaction, and only from the state the caller saw (a job that changed meanwhile
is a :class:`~bridge.errors.Conflict`). A job its back end runs is suspended only where
that back end is :class:`bridge.backend.Suspendable`: the request is recorded in the
document and the loop sends it. Returns the job as stored now and whether the loop
must be woken.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from bridge.backend import Backend, Owner, Suspendable
from bridge.errors import Conflict, PermissionDenied
from bridge.states import JobState
from bridge.store import JobRecord, Store

__all__ = ["set_suspend"]

#: How a suspend/resume reason reads in the job's message.
_VERBS = {"JobHeldUser": "held", "Released": "released"}


def set_suspend(store: Store, backends: Mapping[str, Backend], record: JobRecord,
                suspend: bool, caller: Owner,
                reason: str | None = None) -> tuple[JobRecord, bool]:
    """Suspend ``record``, or resume it (module docstring); ``reason``: the one a job
    that has not reached its back end is given (default ``Suspended``/``Resumed``)."""
    if caller.uid not in (0, record.owner.uid):
        raise PermissionDenied("Access/permission denied")
    job = record.job
    # Before its back end: the state says what to do, and the document changes with
    # it in one transaction (a crash between the two would leave a Pending job whose
    # document says suspended, that a second hold would take as done).
    if suspend and record.state == JobState.PENDING and record.attempts == 0:
        job.spec.suspend = True
        verb = _VERBS.get(reason or "", "suspended")
        held = store.transition_from(
            record.id, JobState.PENDING, JobState.SUSPENDED, reason or "Suspended",
            f"{verb} by {caller.user}", **store.document_fields(job))
        if held is None:
            raise Conflict("Job is no longer pending execution (it changed meanwhile)")
        return held, False
    if not suspend and record.state == JobState.SUSPENDED:
        job.spec.suspend = False
        rec = store.transition_from(
            record.id, JobState.SUSPENDED, JobState.PENDING, reason or "Resumed",
            f"{_VERBS.get(reason or '', 'resumed')} by {caller.user}",
            next_attempt_at=time.time(), **store.document_fields(job))
        if rec is None:
            raise Conflict("Job is not suspended (it changed meanwhile)")
        return rec, True
    if bool(job.spec.suspend) == suspend:
        return record, False
    job.spec.suspend = suspend
    backend = backends.get(record.backend)
    if record.state.active and isinstance(backend, Suspendable):
        store.save_document(record.id, job)
        return store.get(record.id), True
    raise Conflict(f"cannot {'suspend' if suspend else 'resume'} a job in state "
                   f"{record.state} on back end {record.backend}")
