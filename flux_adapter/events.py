"""Flux job events (RFC 21 eventlogs, job-list records) to bridge states — pure functions.

A job's eventlog replays into a :class:`JobHistory` (:func:`replay`, :func:`apply_event`):

* ``submit`` -> NEW, ``validate`` -> DEPEND, ``depend`` -> PRIORITY, ``priority`` ->
  SCHED: :attr:`BackendState.PENDING`;
* ``alloc`` -> RUN (the job holds its nodes), ``start`` (job shells started):
  :attr:`BackendState.RUNNING`;
* ``finish`` (``status``: the largest job shell wait status) or an ``exception`` of
  severity 0 -> CLEANUP: still :attr:`BackendState.RUNNING` (resources are being
  released, epilogs run), like Slurm's COMPLETING;
* ``clean`` -> INACTIVE: final. The result is decided, as the job manager decides it,
  by the *end event* (the first event that moved the job to CLEANUP): ``finish`` with
  status 0 -> COMPLETED; ``exception`` of type ``cancel`` -> CANCELLED, ``timeout``
  (RFC 21 also names it ``timelimit``) -> TIMEOUT; anything else -> FAILED, with the
  exception's type and note as the reason;
* ``invalidate`` -> the job was refused after submission: FAILED.

Other events (``urgency``, ``memo``, ``release``, ``free``, ``prolog-*`` ...) change
no state. Exit status: ``finish``'s wait status decoded as POSIX does
(:func:`decode_wait_status`): ``exit_code`` is the exit status, or ``128 + signal``
when a signal ended the job shell (``signal`` set too). A task killed by a signal
makes the shell exit ``128 + signal`` itself, which shows as an exit code.

:func:`status_from_list` reads the same from a ``job-list`` record (``state``,
``result``, ``waitstatus``, ``exception_*`` attributes), for the periodic full listing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from bridge.backend import BackendJob, BackendState

__all__ = [
    "PENDING_STATES",
    "JobHistory",
    "JobStatus",
    "apply_event",
    "decode_wait_status",
    "parse_eventlog",
    "replay",
    "status_from_history",
    "status_from_list",
    "to_backend_job",
]

PENDING_STATES = frozenset({"NEW", "DEPEND", "PRIORITY", "SCHED"})
_ACTIVE = PENDING_STATES | {"RUN"}
_TIMEOUT_TYPES = frozenset({"timeout", "timelimit"})

#: job-list ``state`` bits (flux_job_state_t) and ``result`` bits (flux_job_result_t).
_STATE_BITS = {1: "NEW", 2: "DEPEND", 4: "PRIORITY", 8: "SCHED", 16: "RUN", 32: "CLEANUP",
               64: "INACTIVE"}
_RESULT_BITS = {1: "COMPLETED", 2: "FAILED", 4: "CANCELED", 8: "TIMEOUT"}
_RESULT_STATE = {"COMPLETED": BackendState.COMPLETED, "FAILED": BackendState.FAILED,
                 "CANCELED": BackendState.CANCELLED, "TIMEOUT": BackendState.TIMEOUT}


@dataclass(frozen=True)
class JobHistory:
    """What a job's eventlog said so far. Times are the events' timestamps."""

    state: str = "NEW"
    userid: int | None = None
    submit_time: float | None = None
    run_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    clean_time: float | None = None
    #: ``finish`` or ``exception`` (fatal): the event that moved the job to CLEANUP.
    end_event: str | None = None
    finish_status: int | None = None
    exception_type: str | None = None
    exception_note: str | None = None
    priority: int | None = None
    invalid: bool = False


def _context(event: Mapping[str, Any]) -> Mapping[str, Any]:
    ctx = event.get("context")
    return ctx if isinstance(ctx, Mapping) else {}


def _time(event: Mapping[str, Any]) -> float | None:
    ts = event.get("timestamp")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def apply_event(h: JobHistory, event: Mapping[str, Any]) -> JobHistory:
    """``h`` after one RFC 18/21 event (``{"timestamp", "name", "context"?}``). Unknown
    events and events that do not fit the state (a late ``start``) change nothing."""
    name = event.get("name")
    ts = _time(event)
    ctx = _context(event)
    if name == "submit":
        return replace(h, state="NEW" if h.state == "NEW" else h.state,
                       userid=_int(ctx.get("userid")), submit_time=ts)
    if name == "validate" and h.state == "NEW":
        return replace(h, state="DEPEND")
    if name == "invalidate":
        return replace(h, state="INACTIVE", invalid=True, end_time=ts, clean_time=ts)
    if name == "depend" and h.state in ("NEW", "DEPEND"):  # NEW: eventlogs before validate
        return replace(h, state="PRIORITY")
    if name == "priority":
        prio = _int(ctx.get("priority"))
        if h.state in ("NEW", "DEPEND", "PRIORITY"):
            return replace(h, state="SCHED", priority=prio)
        return replace(h, priority=prio)
    if name == "alloc" and h.state in PENDING_STATES:
        return replace(h, state="RUN", run_time=ts)
    if name == "start" and h.state == "RUN" and h.start_time is None:
        return replace(h, start_time=ts)
    if name == "finish":
        status = _int(ctx.get("status"))
        if h.state in _ACTIVE and h.end_event is None:
            return replace(h, state="CLEANUP", end_event="finish", finish_status=status,
                           end_time=ts)
        return replace(h, finish_status=status if h.finish_status is None else h.finish_status)
    if name == "exception":
        severity = _int(ctx.get("severity"))
        if severity == 0 and h.state in _ACTIVE and h.end_event is None:
            return replace(h, state="CLEANUP", end_event="exception",
                           exception_type=str(ctx.get("type") or "exception"),
                           exception_note=str(ctx.get("note") or ""), end_time=ts)
        return h
    if name == "clean":
        return replace(h, state="INACTIVE", clean_time=ts)
    return h


def replay(events: Iterable[Mapping[str, Any]], start: JobHistory | None = None) -> JobHistory:
    """Apply ``events`` in order, from ``start`` (a new job when None)."""
    h = start or JobHistory()
    for event in events:
        if isinstance(event, Mapping):
            h = apply_event(h, event)
    return h


def parse_eventlog(text: str) -> list[dict[str, Any]]:
    """An RFC 18 eventlog (one JSON object per line) as a list of events."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            event = json.loads(line)
            if not isinstance(event, dict) or "name" not in event:
                raise ValueError(f"eventlog line {n}: not an event object")
            out.append(event)
    return out


def decode_wait_status(status: int) -> tuple[int, int | None]:
    """``(exit_code, signal)`` of a POSIX wait status: the exit status, or ``128 +
    signal`` and the signal when a signal ended the process."""
    sig = status & 0x7F
    if sig == 0 or sig == 0x7F:  # exited (or stopped: not an end; read the high byte)
        return (status >> 8) & 0xFF, None
    return 128 + sig, sig


@dataclass(frozen=True)
class JobStatus:
    """A job's bridge-facing status (the part of :class:`BackendJob` events decide)."""

    state: BackendState
    native_state: str
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    start_time: float | None = None
    end_time: float | None = None

    @property
    def progress(self) -> int:
        """0 pending, 1 running, 2 finished: Flux states only move forward."""
        if self.state.finished:
            return 2
        return 0 if self.state is BackendState.PENDING else 1


def _pending_reason(state: str, priority: int | None) -> str | None:
    if state == "DEPEND":
        return "Dependency"
    if state == "SCHED" and priority == 0:
        return "Held"
    return None


def status_from_history(h: JobHistory) -> JobStatus:
    """The bridge status of an eventlog replay (rules in the module docstring)."""
    if h.state in PENDING_STATES:
        return JobStatus(BackendState.PENDING, h.state, reason=_pending_reason(h.state,
                                                                               h.priority))
    exit_code = signal = None
    if h.finish_status is not None:
        exit_code, signal = decode_wait_status(h.finish_status)
    start = h.run_time
    if h.state in ("RUN", "CLEANUP"):
        return JobStatus(BackendState.RUNNING, h.state, start_time=start,
                         end_time=h.end_time if h.state == "CLEANUP" else None)
    # INACTIVE
    if h.invalid:
        return JobStatus(BackendState.FAILED, "FAILED", reason="invalidate: the job was "
                         "refused after submission", end_time=h.end_time)
    end = h.end_time or h.clean_time
    if h.end_event == "finish" and h.finish_status == 0:
        return JobStatus(BackendState.COMPLETED, "COMPLETED", exit_code=0, start_time=start,
                         end_time=end)
    reason = None
    if h.end_event == "exception":
        reason = f"{h.exception_type}: {h.exception_note}" if h.exception_note else (
            h.exception_type)
        if h.exception_type == "cancel":
            return JobStatus(BackendState.CANCELLED, "CANCELED", exit_code, signal, reason,
                             start, end)
        if h.exception_type in _TIMEOUT_TYPES:
            return JobStatus(BackendState.TIMEOUT, "TIMEOUT", exit_code, signal, reason,
                             start, end)
    return JobStatus(BackendState.FAILED, "FAILED", exit_code, signal, reason, start, end)


def _float(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def status_from_list(entry: Mapping[str, Any]) -> JobStatus:
    """The bridge status of one ``job-list`` record (attributes ``state``, ``result``,
    ``waitstatus``, ``exception_occurred``/``_type``/``_note``/``_severity``, ``t_run``,
    ``t_cleanup``, ``t_inactive``)."""
    state = _STATE_BITS.get(_int(entry.get("state")) or 0, "UNKNOWN")
    start = _float(entry.get("t_run"))
    if state in PENDING_STATES:
        return JobStatus(BackendState.PENDING, state,
                         reason=_pending_reason(state, _int(entry.get("priority"))))
    if state in ("RUN", "CLEANUP"):
        return JobStatus(BackendState.RUNNING, state, start_time=start,
                         end_time=_float(entry.get("t_cleanup")) if state == "CLEANUP"
                         else None)
    if state != "INACTIVE":
        return JobStatus(BackendState.UNKNOWN, state)
    result = _RESULT_BITS.get(_int(entry.get("result")) or 0, "FAILED")
    exit_code = signal = None
    waitstatus = _int(entry.get("waitstatus"))
    if waitstatus is not None:
        exit_code, signal = decode_wait_status(waitstatus)
    reason = None
    if entry.get("exception_occurred") and _int(entry.get("exception_severity")) == 0:
        etype = str(entry.get("exception_type") or "exception")
        note = str(entry.get("exception_note") or "")
        reason = f"{etype}: {note}" if note else etype
    end = _float(entry.get("t_cleanup")) or _float(entry.get("t_inactive"))
    if result == "COMPLETED":
        return JobStatus(BackendState.COMPLETED, result, exit_code if exit_code is not None
                         else 0, None, None, start, end)
    return JobStatus(_RESULT_STATE[result], result, exit_code, signal, reason, start, end)


def to_backend_job(job_id: int, uid: str, status: JobStatus, *, nodes: tuple[str, ...] = (),
                   stdout_path: str | None = None, stderr_path: str | None = None,
                   owner_uid: int | None = None, queue: str | None = None) -> BackendJob:
    """A :class:`BackendJob` (``backend_id`` is the decimal Flux job id). stderr goes to
    the stdout file unless the job names its own. A finished job's reason (Flux's
    exception type and note: ``alloc: … unsatisfiable …``, ``exec: task 0 (host node1):
    start failed: …``, ``node-failure: …``) is also its ``detail``, which the engine puts
    in the job's message: the exit code alone would hide why the job failed."""
    return BackendJob(
        backend_id=str(job_id), job_uid=uid, state=status.state,
        native_state=status.native_state, exit_code=status.exit_code, signal=status.signal,
        reason=status.reason, detail=status.reason if status.state.finished else None,
        nodes=nodes, start_time=status.start_time,
        end_time=status.end_time, stdout_path=stdout_path,
        stderr_path=stderr_path or stdout_path, owner_uid=owner_uid, queue=queue)
