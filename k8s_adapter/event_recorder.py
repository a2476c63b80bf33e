"""When the TrainJob front door records an Event for a job (k8s_adapter/frontdoor.py,
item 7), and the recording itself; what an event says is :mod:`k8s_adapter.trainjob_events`.

Contract (:class:`EventRecorder`):

* One event per change of the job's (state, reason) (:func:`event_key`).
* What each job showed when the door started is taken as recorded by the door that saw
  it: :meth:`EventRecorder.seed` takes the live jobs at start; a finished job first seen
  later counts as recorded when it ended before that moment. So memory follows the
  live jobs, not every job the store ever held.
* A change of state is always recorded. A change of reason within a state is recorded
  only while the job's allowance for its kind of change lasts: :data:`EVENT_BURST`, then
  one more per :data:`EVENT_REFILL_SECONDS` (as client-go's event spam filter). There are
  two allowances per job, so that a queue's reason flipping cannot use up the one that
  records a job being held or let go (its reason moving between the classes of
  :func:`hold_class`: held, hold refused, neither), which answers a user's
  ``suspend``/``resume``. A reason held back is due once its allowance is back
  (:meth:`EventRecorder.due`: the door looks at the job again and records it if it is
  still the job's).
* A failed write is logged, not retried: events are best effort.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from bridge.backend import BackendRejected, BackendUnavailable
from k8s_adapter.status import HELD_REASONS
from k8s_adapter.trainjob_events import event_body, event_key

if TYPE_CHECKING:
    from bridge.service import JobRecord

__all__ = ["EVENT_BURST", "EVENT_REFILL_SECONDS", "EventRecorder", "hold_class"]

log = structlog.get_logger("k8s_adapter.frontdoor")

#: Events a job may record for changes of reason within a state, at once, and the
#: seconds that earn one more.
EVENT_BURST = 5
EVENT_REFILL_SECONDS = 60.0
#: The reason of a job whose hold was refused (bridge/engine_signals.py).
SUSPEND_REFUSED = "SuspendRefused"


def hold_class(reason: str) -> str:
    """Whether ``reason`` says the job is held, that its hold was refused, or neither:
    a change of class is a hold or a release, on its own allowance."""
    if reason in HELD_REASONS:
        return "held"
    return "refused" if reason == SUSPEND_REFUSED else ""


class EventCalls(Protocol):
    async def record_event(self, body: dict[str, Any]) -> None: ...


class EventRecorder:
    """See the module docstring."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        #: uid -> the event key last recorded.
        self._last: dict[str, tuple[str, str]] = {}
        #: (uid, kind of change) -> (allowance left, when it was counted: monotonic);
        #: the kind is ``"hold"`` (the reason's :func:`hold_class` changed) or ``""``.
        self._allowance: dict[tuple[str, str], tuple[float, float]] = {}
        #: uid -> when (monotonic) a held-back change of reason may be recorded.
        self._due: dict[str, float] = {}
        #: Jobs that ended before this moment (wall clock), first seen later: recorded.
        self._seeded_at = 0.0

    def seed(self, live: Iterable[JobRecord], now: float) -> None:
        """Take what the ``live`` jobs show at ``now`` (the door's start) as recorded."""
        self._seeded_at = now
        for rec in live:
            self._last.setdefault(rec.uid, event_key(rec))

    def forget(self, uid: str) -> None:
        """The TrainJob is gone."""
        self._last.pop(uid, None)
        self._forget_allowance(uid)
        self._due.pop(uid, None)

    def due(self) -> list[str]:
        """The uids whose held-back reason may be recorded now (each once)."""
        now = time.monotonic()
        ready = [uid for uid, at in self._due.items() if at <= now]
        for uid in ready:
            del self._due[uid]
        return ready

    async def record(self, calls: EventCalls, trainjob: Mapping[str, Any],
                     rec: JobRecord) -> None:
        """Record an Event of ``rec``'s state and reason on ``trainjob`` unless it is
        recorded or held back (module docstring)."""
        key = event_key(rec)
        last = self._last.get(rec.uid)
        if last == key:
            return
        if last is None and rec.state.terminal and rec.updated_at <= self._seeded_at:
            self._last[rec.uid] = key  # it ended before this door started
            return
        if last is not None and last[0] == key[0] and not self._allowed(
                rec.uid, "hold" if hold_class(last[1]) != hold_class(key[1]) else ""):
            return  # only the reason changed, and the job has had its say lately
        self._last[rec.uid] = key
        if rec.state.terminal:
            self._forget_allowance(rec.uid)
            self._due.pop(rec.uid, None)
        body = event_body(rec, trainjob, self.instance, time.time())
        try:
            await calls.record_event(body)
        except (BackendUnavailable, BackendRejected) as exc:
            meta = trainjob.get("metadata") or {}
            log.warning("TrainJob %s/%s: event %s not recorded: %s", meta.get("namespace"),
                        meta.get("name"), body["reason"], exc)

    def _allowed(self, uid: str, kind: str) -> bool:
        """Take one of the job's allowance for this kind of change of reason, if it has
        one; else note when it will have one."""
        now = time.monotonic()
        left, at = self._allowance.get((uid, kind), (float(EVENT_BURST), now))
        left = min(float(EVENT_BURST), left + (now - at) / EVENT_REFILL_SECONDS)
        if left < 1.0:
            self._allowance[(uid, kind)] = (left, now)
            at_least = now + (1.0 - left) * EVENT_REFILL_SECONDS
            self._due[uid] = min(self._due.get(uid, at_least), at_least)
            return False
        self._allowance[(uid, kind)] = (left - 1.0, now)
        return True

    def _forget_allowance(self, uid: str) -> None:
        for kind in ("", "hold"):
            self._allowance.pop((uid, kind), None)
