"""Suspend, resume, hold and release one job: :meth:`bridge.engine.Engine.set_suspend`.

Contract (:func:`set_suspend`): only the job's owner or root may
(:class:`~bridge.errors.PermissionDenied`). Before its back end the job just waits:
Pending ↔ Suspended, the state and the stored document (``spec.suspend``) changing in
one transaction, and only from the state the caller saw (a job that changed meanwhile
is a :class:`~bridge.errors.Conflict`). A job its back end runs is suspended only where
that back end is :class:`bridge.backend.Suspendable`: the request is recorded in the
document and the loop sends it. Returns the job as stored now and whether the loop
must be woken.

Contract (:func:`set_held_in_backend`, ``tcontrol hold``/``release`` of a job already in
its back end's queue): only a Submitted job that has never started, on a
:class:`~bridge.backend.QueueHolding` back end (Slurm: ``scontrol hold``/``release``,
never a requeue). The hold is recorded in ``jobs.held`` (``JobHeldUser`` or
``JobHeldAdmin``; after a release ``Released``/``ReleasedAdmin`` until the release is
sent, so that a restart still sends it, as root for an administrator's hold) with
``spec.suspend``, in one transaction that expects the job as read; only the engine
writes ``held``. The loop sends it (:mod:`bridge.engine_signals`, as root for an
administrator's hold); the job's reason then comes from its back end (Slurm's
``JobHeldUser``/``JobHeldAdmin``). While a hold or a release is pending, suspend and
resume are refused (the hold is released, not resumed), whoever asks (the TrainJob
door's ``spec.suspend`` included). A job that changed meanwhile is a
:class:`~bridge.errors.Conflict`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from bridge.backend import Backend, Owner, QueueHolding, Suspendable
from bridge.errors import Conflict, PermissionDenied
from bridge.states import JobState
from bridge.store import JobRecord, Store

__all__ = ["set_held_in_backend", "set_suspend"]

#: How a suspend/resume reason reads in the job's message.
_VERBS = {"JobHeldUser": "held", "Released": "released"}


def set_suspend(store: Store, backends: Mapping[str, Backend], record: JobRecord,
                suspend: bool, caller: Owner,
                reason: str | None = None) -> tuple[JobRecord, bool]:
    """Suspend ``record``, or resume it (module docstring); ``reason``: the one a job
    that has not reached its back end is given (default ``Suspended``/``Resumed``)."""
    if caller.uid not in (0, record.owner.uid):
        raise PermissionDenied("Access/permission denied")
    if record.held in HELD_IN_QUEUE:
        raise Conflict("Job is held in its back end's queue: release it (tcontrol release)")
    if record.held in RELEASING:
        raise Conflict("Job's release is being sent to its back end: try again shortly")
    if (not suspend and record.state == JobState.SUSPENDED and record.reason in HELD_IN_QUEUE
            and reason != "Released"):
        # Held before its back end (tbatch --hold, tcontrol hold): only a release ends
        # it, whoever resumes (the TrainJob door's spec.suspend included).
        raise Conflict("Job is held, not suspended: release it (tcontrol release)")
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


#: A hold asked in a back end's queue, and a release not yet sent (``JobRecord.held``).
HELD_IN_QUEUE = ("JobHeldUser", "JobHeldAdmin")
RELEASING = ("Released", "ReleasedAdmin")


def held_in_backend(record: JobRecord) -> str | None:
    """``JobHeldUser``/``JobHeldAdmin`` when ``tcontrol hold`` held ``record`` in its
    back end's queue, else None."""
    return record.held if record.held in HELD_IN_QUEUE else None


def can_hold_in_backend(backends: Mapping[str, Backend], record: JobRecord) -> bool:
    """Whether ``record`` waits in a back end's queue that can hold it (module
    docstring): Submitted, never started, on a :class:`QueueHolding` back end."""
    return (record.state is JobState.SUBMITTED and record.started_at is None
            and record.backend_id is not None
            and isinstance(backends.get(record.backend), QueueHolding))


def set_held_in_backend(store: Store, backends: Mapping[str, Backend], record: JobRecord,
                        hold: str | None, caller: Owner) -> JobRecord:
    """Hold ``record`` in its back end's queue with reason ``hold`` (``JobHeldUser`` or
    ``JobHeldAdmin``), or release it (``hold`` None); the caller checked who may. The
    job's reason stays what its back end last said until the back end says it is held
    (then a restart still knows whether the hold was sent)."""
    if hold is None and record.held in HELD_IN_QUEUE:
        # A release, even of a job that started meanwhile (its hold was then refused
        # and cleared, or it is still to be sent): nothing is left held.
        held = "ReleasedAdmin" if record.held == "JobHeldAdmin" else "Released"
    elif hold is not None and can_hold_in_backend(backends, record):
        held = hold
    else:
        raise Conflict(f"Job is no longer pending execution ({record.state} in back end "
                       f"{record.backend!r})")
    job = record.job
    job.spec.suspend = hold is not None
    verb = "released" if hold is None else "held"
    updated = store.transition_from(
        record.id, record.state, record.state, record.reason,
        f"{verb} by {caller.user} (sent to {record.backend})", held=held,
        **store.document_fields(job))
    if updated is None:
        raise Conflict("Job is no longer pending execution (it changed meanwhile)")
    return updated
