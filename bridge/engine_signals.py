"""What the engine sends to jobs already in their back ends: cancels and suspends.

Contract (one :class:`Signals` per engine, called once per pass):

* :meth:`Signals.send_cancels` sends a cancel for every Submitted or Running job with a
  cancel asked for, again at most every :data:`CANCEL_RESEND` seconds until the world
  reports the end. A refusal or an unreachable back end never stops the others.
* :meth:`Signals.send_suspends` brings each :class:`bridge.backend.Suspendable` back end
  in line with each active job's ``spec.suspend``: only the jobs that ask for a suspend,
  show one, or were sent one are read (most active jobs need nothing; reading them all
  every pass cost tenths of a second at thousands of jobs).
  A refusal (:class:`~bridge.backend.BackendRejected`: Slurm will not requeue the job,
  or it has finished) is final for that request in this process: the job's reason
  says so (``SuspendRefused``) and it is not asked again until a user asks again
  (:meth:`Signals.asked`); an unreachable back end is asked again next pass. At most
  :data:`SUSPENDS_PER_USER` requests per user go out in one pass (one user's
  thousands of tasks cannot hold up the pass); the rest wait for the next.
* :meth:`Signals.forget` drops what is kept about a finished job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import structlog

from bridge.backend import Backend, BackendRejected, BackendUnavailable, Owner, Suspendable
from bridge.model import ANN_HOLD
from bridge.outcome import SUSPEND_REFUSED
from bridge.states import JobState
from bridge.store import JobRecord, Store

__all__ = ["CANCEL_RESEND", "SUSPENDS_PER_USER", "Signals"]

log = structlog.get_logger("hpc_bridge.engine")

#: A cancel not yet seen through is sent again after this many seconds.
CANCEL_RESEND = 30.0
#: Suspend/resume requests sent for one user's jobs in one pass, at most.
SUSPENDS_PER_USER = 8
_ACTIVE = [JobState.SUBMITTED, JobState.RUNNING]


#: What a job's back end is asked to hold it as: not at all (False), suspended or held
#: by its owner (True), or held by an administrator (``"admin"``, sent as root).
Target = bool | str
ROOT = Owner(0, 0, "root")


def _target(rec: JobRecord) -> Target:
    """What ``rec`` asks of its back end (from the summary: no document decoded)."""
    if not rec.suspend_requested:
        return False
    return "admin" if rec.summary.get("heldInBackend") == "JobHeldAdmin" else True


def _shown(rec: JobRecord) -> Target:
    """What the world last showed of ``rec``, for a job this process sent nothing:
    a hold the bridge asked for (or a release it has not sent yet) by Slurm's reason; a
    hold made in the world by someone else is not the bridge's to release."""
    if rec.reason in ("Suspended", "BackendSuspended"):
        return True
    if rec.reason in ("JobHeldUser", "JobHeldAdmin") and rec.summary.get("heldInBackend"):
        return "admin" if rec.reason == "JobHeldAdmin" else True
    return False


def _as_whom(rec: JobRecord, target: Target) -> Owner:
    """Root for an administrator's hold, and for the release of one the bridge made."""
    held = rec.summary.get("heldInBackend")
    if target == "admin" or (target is False and held == "ReleasedAdmin"):
        return ROOT
    return rec.owner


class Signals:
    """Cancels and suspends for jobs in their back ends (module docstring)."""

    def __init__(self, store: Store, backends: Mapping[str, Backend]) -> None:
        self.store = store
        self.backends = backends
        #: When a cancel was last sent, per job.
        self._cancel_sent: dict[int, float] = {}
        #: Suspend state last sent to a back end per job (:func:`_target`).
        self._suspend_sent: dict[int, Target] = {}
        #: The request a back end refused, per job: not sent again while it stands.
        self._suspend_refused: dict[int, Target] = {}

    def asked(self, job_id: int) -> None:
        """A user asked to suspend or resume the job again: a refusal no longer
        stands in the way of sending it."""
        self._suspend_refused.pop(job_id, None)

    def forget(self, job_id: int) -> None:
        self._cancel_sent.pop(job_id, None)
        self._suspend_sent.pop(job_id, None)
        self._suspend_refused.pop(job_id, None)

    async def send_cancels(self, now: float) -> None:
        for rec in self.store.list_jobs(_ACTIVE, cancel_requested=True):
            if rec.backend_id is None:
                continue
            if now - self._cancel_sent.get(rec.id, 0.0) < CANCEL_RESEND:
                continue
            try:
                await self.backends[rec.backend].cancel(rec.backend_id, rec.owner)
                self._cancel_sent[rec.id] = now
                log.info("cancel sent", job_id=rec.id, backend_id=rec.backend_id)
            except BackendUnavailable as exc:
                log.warning("cancel failed; will retry", job_id=rec.id, error=str(exc))
            except BackendRejected as exc:
                # Refused (e.g. the world says the owner may not): try again later, but
                # never let one job's refusal stop the pass for the others.
                self._cancel_sent[rec.id] = now
                log.error("back end refused the cancel; will ask again", job_id=rec.id,
                          error=str(exc))

    async def send_suspends(self) -> None:
        for name, backend in self.backends.items():
            if not isinstance(backend, Suspendable):
                continue
            sent = [i for i, s in self._suspend_sent.items() if s]
            candidates = {r.id: r for r in self.store.suspend_candidates(_ACTIVE, name)}
            for rec in self.store.by_ids([i for i in sent if i not in candidates]):
                if rec.state in _ACTIVE and rec.backend == name:
                    candidates[rec.id] = rec
            await self._suspend(sorted(candidates.values(), key=lambda r: r.id))

    async def _suspend(self, active: list[JobRecord]) -> None:
        sent_for: Counter[int] = Counter()
        for rec in active:
            backend = self.backends.get(rec.backend)
            if not isinstance(backend, Suspendable) or rec.backend_id is None:
                continue
            target = _target(rec)
            want = target is not False
            sent = self._suspend_sent.get(rec.id)
            if sent is None:  # not sent by this process: what the world last showed
                sent = _shown(rec)
            if sent == target or rec.cancel_requested:
                continue
            if self._suspend_refused.get(rec.id) == target:
                continue  # refused, and not asked for otherwise since
            if sent_for[rec.owner.uid] >= SUSPENDS_PER_USER:
                continue  # this user's turn is over for this pass
            sent_for[rec.owner.uid] += 1
            verb = "suspend" if want else "resume"
            try:
                await backend.set_suspended(rec.backend_id, want, _as_whom(rec, target))
            except BackendUnavailable as exc:
                log.warning("suspend/resume failed; will retry", job_id=rec.id,
                            error=str(exc))
                continue
            except BackendRejected as exc:
                log.warning("suspend/resume refused", job_id=rec.id, error=str(exc))
                # Only while the job is as read: it may have ended meanwhile (then
                # forget() has run, and nothing is kept about it).
                if self.store.transition_from(rec.id, rec.state, rec.state, SUSPEND_REFUSED,
                                              f"{rec.backend} refused to {verb} it: "
                                              f"{exc}") is not None:
                    self._suspend_refused[rec.id] = target
                continue
            self._suspend_refused.pop(rec.id, None)
            if self.store.transition_from(
                    rec.id, rec.state, rec.state, *_sent_reason(rec, want),
                    **_release_done(rec, want)) is not None:
                self._suspend_sent[rec.id] = target


def _sent_reason(rec: JobRecord, want: bool) -> tuple[str, str]:
    """The reason and message of a job whose suspend, resume, hold or release was sent."""
    held = rec.summary.get("heldInBackend")
    if want and held in ("JobHeldUser", "JobHeldAdmin"):
        return str(held), f"held in {rec.backend}"
    if not want and held in ("Released", "ReleasedAdmin"):
        return "Released", f"released in {rec.backend}"
    return ("Suspended", f"suspended in {rec.backend}") if want else (
        "Resumed", f"resumed in {rec.backend}")


def _release_done(rec: JobRecord, want: bool) -> dict[str, str]:
    """The document without the release mark, once the release is sent (rare: the only
    path here that decodes a document)."""
    if want or rec.summary.get("heldInBackend") not in ("Released", "ReleasedAdmin"):
        return {}
    job = rec.job
    job.metadata.annotations.pop(ANN_HOLD, None)
    return Store.document_fields(job)
