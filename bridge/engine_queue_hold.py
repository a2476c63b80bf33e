"""Sending ``tcontrol hold``/``release`` of jobs waiting in their back end's queue.

Contract (:class:`QueueHolds`, called by :mod:`bridge.engine_signals` once per pass for
the jobs whose ``jobs.held`` is set, see :mod:`bridge.engine_hold`):

* ``JobHeldUser``/``JobHeldAdmin``: the back end's :meth:`~bridge.backend.QueueHolding.
  hold_in_queue` is sent, as the owner or (an administrator's hold) as root, until the
  back end has it: by this process, or, after a restart, when the job's reason (the back
  end's word) names that hold. A refusal (the job started: a hold never takes a job off
  its nodes) clears the hold (``held`` and ``spec.suspend``), reason ``SuspendRefused``
  with the back end's words.
* ``Released``/``ReleasedAdmin``: the release is sent (as root for an administrator's
  hold) when this process sent the hold, else while the job's reason still shows a hold
  (after a restart; a reason is not trusted to end a hold this process made: it may
  come from a listing asked for before the hold), then the mark is cleared; a refusal
  clears it too (nothing is left to release).
* Nothing is sent for a job with a cancel asked for; an unreachable back end is asked
  again next pass; at most ``per_user`` requests per user go out in a pass, counted with
  the suspends (an administrator's hold or release counts as root's, not the owner's).
* What the back end answered is written only if the job's hold is still as read: a
  hold or release asked while the loop waited for the back end is sent next pass.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import structlog

from bridge.backend import BackendRejected, BackendUnavailable, Owner, QueueHolding
from bridge.engine_hold import HELD_IN_QUEUE
from bridge.outcome import SUSPEND_REFUSED
from bridge.store import JobNotFound, JobRecord, Store

__all__ = ["ROOT", "QueueHolds"]

log = structlog.get_logger("hpc_bridge.engine")

ROOT = Owner(0, 0, "root")


class QueueHolds:
    """Holds and releases in back ends' queues (module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: The ``held`` value this process sent, per job.
        self._sent: dict[int, str] = {}

    def forget(self, job_id: int) -> None:
        self._sent.pop(job_id, None)

    def applied(self, rec: JobRecord) -> bool:
        """Whether the back end has what ``rec.held`` asks (module docstring)."""
        held = rec.held or ""
        sent = self._sent.get(rec.id)
        if sent == held:
            return True
        if held in HELD_IN_QUEUE:
            return rec.reason == held
        if sent in HELD_IN_QUEUE:
            # This process held it: only the release it sends ends that hold. The
            # reason shown may come from a listing asked for before the hold (a slow
            # poll applied after it), which shows no hold yet.
            return False
        return rec.reason not in HELD_IN_QUEUE  # a release: no hold shown any more

    async def send(self, rec: JobRecord, backend: QueueHolding,
                   sent_for: Counter[int], per_user: int) -> None:
        """Send what ``rec.held`` asks, or clear a release already applied."""
        held = rec.held or ""
        hold = held in HELD_IN_QUEUE
        if self.applied(rec):
            if not hold:
                self._clear(rec, rec.reason, rec.message)
            return
        as_whom = ROOT if held in ("JobHeldAdmin", "ReleasedAdmin") else rec.owner
        # Root's requests are counted as root's: an owner's own holds and releases
        # cannot use up the turn of an administrator's hold of their job.
        if rec.cancel_requested or rec.backend_id is None or sent_for[as_whom.uid] >= per_user:
            return
        sent_for[as_whom.uid] += 1
        verb = "hold" if hold else "release"
        try:
            await backend.hold_in_queue(rec.backend_id, hold, as_whom)
        except BackendUnavailable as exc:
            log.warning(f"{verb} failed; will retry", job_id=rec.id, error=str(exc))
            return
        except BackendRejected as exc:
            log.warning(f"{verb} refused", job_id=rec.id, error=str(exc))
            if self._unchanged(rec):
                self._clear(rec, SUSPEND_REFUSED if hold else rec.reason,
                            f"{rec.backend} refused to {verb} it: {exc}", unsuspend=hold)
            return
        if not self._unchanged(rec):
            return  # asked otherwise while this was sent: the next pass sends that
        if hold:
            if self.store.transition_from(rec.id, rec.state, rec.state, held,
                                          f"held in {rec.backend}") is not None:
                self._sent[rec.id] = held
        else:
            self._clear(rec, "Released", f"released in {rec.backend}")

    def _unchanged(self, rec: JobRecord) -> bool:
        """Whether ``rec``'s hold is still as read (a hold or release may have been asked
        while the loop waited for the back end; no await between this and the write)."""
        try:
            return self.store.get(rec.id).held == rec.held
        except JobNotFound:
            return False

    def _clear(self, rec: JobRecord, reason: str, message: str,
               unsuspend: bool = False) -> None:
        """No hold is asked any more (only while the job is as read)."""
        fields: dict[str, Any] = {"held": None}
        if unsuspend:  # rare: the only path here that decodes a document
            job = rec.job
            job.spec.suspend = False
            fields.update(Store.document_fields(job))
        if self.store.transition_from(rec.id, rec.state, rec.state, reason, message,
                                      **fields) is not None:
            self._sent.pop(rec.id, None)
