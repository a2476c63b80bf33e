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
  thousands of tasks cannot hold up the pass); the rest wait for the next. A job held
  or released in its back end's queue (``jobs.held``) is sent that instead
  (:mod:`bridge.engine_queue_hold`).
* :meth:`Signals.forget` drops what is kept about a finished job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import structlog

from bridge.backend import (
    Backend,
    BackendRejected,
    BackendUnavailable,
    QueueHolding,
    Suspendable,
)
from bridge.engine_queue_hold import QueueHolds
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


class Signals:
    """Cancels and suspends for jobs in their back ends (module docstring)."""

    def __init__(self, store: Store, backends: Mapping[str, Backend]) -> None:
        self.store = store
        self.backends = backends
        #: When a cancel was last sent, per job.
        self._cancel_sent: dict[int, float] = {}
        #: Suspend state last sent to a back end per job (``spec.suspend`` it applied).
        self._suspend_sent: dict[int, bool] = {}
        #: The request a back end refused, per job: not sent again while it stands.
        self._suspend_refused: dict[int, bool] = {}
        #: Holds and releases in back ends' queues (bridge/engine_queue_hold.py).
        self.queue_holds = QueueHolds(store)

    def asked(self, job_id: int) -> None:
        """A user asked to suspend or resume the job again: a refusal no longer
        stands in the way of sending it."""
        self._suspend_refused.pop(job_id, None)

    def forget(self, job_id: int) -> None:
        self._cancel_sent.pop(job_id, None)
        self._suspend_sent.pop(job_id, None)
        self._suspend_refused.pop(job_id, None)
        self.queue_holds.forget(job_id)

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
            # Each job this process sent a suspend or resume: what it sent, not the
            # reason the store shows, decides whether it needs another.
            sent = list(self._suspend_sent)
            candidates = {r.id: r for r in self.store.suspend_candidates(name)}
            for rec in self.store.by_ids([i for i in sent if i not in candidates]):
                if rec.state in _ACTIVE and rec.backend == name:
                    candidates[rec.id] = rec
            await self._suspend(sorted(candidates.values(), key=lambda r: r.id))

    async def _suspend(self, active: list[JobRecord]) -> None:
        sent_for: Counter[int] = Counter()
        for rec in active:
            backend = self.backends.get(rec.backend)
            if rec.held is not None and isinstance(backend, QueueHolding):
                await self.queue_holds.send(rec, backend, sent_for, SUSPENDS_PER_USER)
                continue
            if not isinstance(backend, Suspendable) or rec.backend_id is None:
                continue
            want = rec.suspend_requested  # from the summary: no document decoded
            sent = self._suspend_sent.get(rec.id)
            if sent is None:  # not sent by this process: what the world last showed
                sent = rec.reason in ("Suspended", "BackendSuspended")
            if sent == want or rec.cancel_requested:
                continue
            if self._suspend_refused.get(rec.id) is want:
                continue  # refused, and not asked for otherwise since
            if sent_for[rec.owner.uid] >= SUSPENDS_PER_USER:
                continue  # this user's turn is over for this pass
            sent_for[rec.owner.uid] += 1
            verb = "suspend" if want else "resume"
            try:
                await backend.set_suspended(rec.backend_id, want, rec.owner)
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
                    self._suspend_refused[rec.id] = want
                continue
            except Exception:  # one job's data must never stop the pass for the others
                log.exception("suspend/resume failed; will retry", job_id=rec.id)
                continue
            self._suspend_refused.pop(rec.id, None)
            if self.store.transition_from(
                    rec.id, rec.state, rec.state, "Suspended" if want else "Resumed",
                    f"{'suspended' if want else 'resumed'} in {rec.backend}") is not None:
                self._suspend_sent[rec.id] = want
