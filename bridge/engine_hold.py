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
:class:`~bridge.backend.Suspendable` back end (Slurm: ``scontrol hold``/``release``;
Kubernetes: the JobSet's ``spec.suspend``). The hold is recorded in the document
(``spec.suspend`` and :data:`bridge.model.ANN_HOLD`, naming ``JobHeldUser`` or
``JobHeldAdmin``; after a release ``Released``/``ReleasedAdmin`` until the release is
sent, so that a restart still sends it, as root for an administrator's hold) in one
transaction that expects the job still Submitted, and the loop
sends it (:mod:`bridge.engine_signals`, as root for an administrator's hold); the
job's reason then comes from its back end (``JobHeldUser``/``JobHeldAdmin`` from Slurm).
A job that changed meanwhile is a :class:`~bridge.errors.Conflict`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from bridge.backend import Backend, Owner, Suspendable
from bridge.errors import Conflict, PermissionDenied
from bridge.model import ANN_HOLD
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


def held_in_backend(record: JobRecord) -> str | None:
    """``JobHeldUser``/``JobHeldAdmin`` when ``record`` is held in its back end's queue by
    ``tcontrol hold`` (from the summary: no document decoded), else None."""
    held = record.summary.get("heldInBackend")
    return str(held) if held in ("JobHeldUser", "JobHeldAdmin") else None


def can_hold_in_backend(backends: Mapping[str, Backend], record: JobRecord) -> bool:
    """Whether ``record`` waits in a back end that can hold it (module docstring)."""
    return (record.state is JobState.SUBMITTED and record.started_at is None
            and record.backend_id is not None
            and isinstance(backends.get(record.backend), Suspendable))


def set_held_in_backend(store: Store, backends: Mapping[str, Backend], record: JobRecord,
                        hold: str | None, caller: Owner) -> JobRecord:
    """Hold ``record`` in its back end's queue with reason ``hold`` (``JobHeldUser`` or
    ``JobHeldAdmin``), or release it (``hold`` None); the caller checked who may. The
    job's reason stays what its back end last said until the back end says it is held
    (then a restart still knows whether the hold was sent)."""
    if not can_hold_in_backend(backends, record):
        raise Conflict(f"Job is no longer pending execution ({record.state} in back end "
                       f"{record.backend!r})")
    job = record.job
    job.spec.suspend = hold is not None
    if hold is None:  # marked until the release is sent (bridge/engine_signals.py)
        was = job.metadata.annotations.get(ANN_HOLD)
        job.metadata.annotations[ANN_HOLD] = (
            "ReleasedAdmin" if was == "JobHeldAdmin" else "Released")
    else:
        job.metadata.annotations[ANN_HOLD] = hold
    verb = "released" if hold is None else "held"
    updated = store.transition_from(
        record.id, JobState.SUBMITTED, JobState.SUBMITTED, record.reason,
        f"{verb} by {caller.user} (sent to {record.backend})", **store.document_fields(job))
    if updated is None:
        raise Conflict("Job is no longer pending execution (it changed meanwhile)")
    return updated
