"""What a back end's report means for a stored job: pure, no I/O.

:func:`outcome` maps one :class:`bridge.backend.BackendJob` onto the job's next state,
reason, message and the fields that changed (nodes, output paths, queue, start, end,
exit code), or None when nothing changed. The engine writes it with
:meth:`bridge.store.Store.transition` (the state machine checks the move).

* ``PENDING`` after the job ran (a requeue): the job keeps its state; the back end's
  reason (``Queued`` when it gives none) is recorded.
* ``RUNNING``/``SUSPENDED``/``UNKNOWN``: ``Running`` (reason ``BackendSuspended`` while
  the back end holds it); a job suspended before it ever started stays ``Submitted``
  (reason ``BackendSuspended``, or the hold's ``JobHeldUser``/``JobHeldAdmin`` when
  ``tcontrol hold`` held it there); a running job keeps the reason ``SuspendRefused``.
* finished: ``Succeeded`` (exit code 0), ``Cancelled`` (``Cancelled`` when the bridge
  asked, ``DependencyNeverSatisfied`` when Slurm ended it for its dependency, else
  ``CancelledInBackend``), ``Failed`` with ``DeadlineExceeded``,
  the back end's ``failure_reason``, else ``Signaled``, ``NonZeroExitCode`` or
  ``BackendFailed``; the back end's native state
  and detail (e.g. Flux's exception note) are kept in the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bridge.backend import BackendJob, BackendState
from bridge.states import JobState
from bridge.store import JobRecord

#: The reason of a running job whose back end refused to suspend it
#: (bridge/engine_signals.py); a report that it still runs keeps it.
SUSPEND_REFUSED = "SuspendRefused"


@dataclass(frozen=True)
class Outcome:
    """A transition to write: ``state``, ``reason``, ``message`` and changed ``fields``."""

    state: JobState
    reason: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


def _changed_fields(rec: JobRecord, bj: BackendJob) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if bj.nodes and list(bj.nodes) != rec.nodes:
        fields["nodes"] = list(bj.nodes)
    if bj.stdout_path and bj.stdout_path != rec.stdout_path:
        fields["stdout_path"] = bj.stdout_path
    if bj.stderr_path and bj.stderr_path != rec.stderr_path:
        fields["stderr_path"] = bj.stderr_path
    if bj.queue and bj.queue != rec.queue:
        fields["queue"] = bj.queue
    if bj.start_time and rec.started_at is None:
        fields["started_at"] = bj.start_time
    return fields


def _failure(bj: BackendJob) -> tuple[str, str]:
    if bj.failure_reason:  # the back end's words say it all
        return bj.failure_reason, bj.detail or bj.native_state or bj.failure_reason
    if bj.signal:
        reason, message = "Signaled", f"killed by signal {bj.signal}"
    elif bj.exit_code:
        reason, message = "NonZeroExitCode", f"exit code {bj.exit_code}"
    else:
        reason, message = "BackendFailed", bj.native_state
    if bj.native_state and bj.native_state not in ("FAILED", "COMPLETED", "Failed"):
        message += f" ({bj.native_state})"
    if bj.detail:
        message += f": {bj.detail}"
    return reason, message


def outcome(rec: JobRecord, bj: BackendJob) -> Outcome | None:
    """The transition ``bj`` asks of ``rec`` (see the module's rules), or None."""
    fields = _changed_fields(rec, bj)
    state = bj.state
    if state is BackendState.PENDING:
        reason = bj.reason or "Queued"
        if rec.reason != reason or fields:
            return Outcome(rec.state, reason, bj.native_state, fields)
        return None
    if (state is BackendState.SUSPENDED and rec.state is JobState.SUBMITTED
            and rec.started_at is None and not bj.start_time):
        # Held in the back end before it ever ran: still waiting, not running (with
        # the hold's reason when tcontrol hold made it: bridge/engine_hold.py).
        held = rec.held
        reason = held if held in ("JobHeldUser", "JobHeldAdmin") else "BackendSuspended"
        if rec.reason != reason or fields:
            return Outcome(JobState.SUBMITTED, reason, bj.native_state, fields)
        return None
    if (state is BackendState.RUNNING and rec.state is JobState.RUNNING
            and rec.reason == SUSPEND_REFUSED and rec.suspend_requested):
        # Still running because the back end refused to suspend it: the reason says
        # so until the job changes (or a new request is sent).
        return Outcome(rec.state, rec.reason, rec.message, fields) if fields else None
    if state in (BackendState.RUNNING, BackendState.SUSPENDED, BackendState.UNKNOWN):
        reason = "BackendSuspended" if state is BackendState.SUSPENDED else "Running"
        if rec.state != JobState.RUNNING or rec.reason != reason or fields:
            return Outcome(JobState.RUNNING, reason,
                           f"{bj.native_state} on {','.join(bj.nodes)}", fields)
        return None
    if bj.end_time:
        fields["finished_at"] = bj.end_time
    fields["exit_code"] = bj.exit_code
    if state is BackendState.COMPLETED and (bj.exit_code or 0) == 0:
        return Outcome(JobState.SUCCEEDED, "Completed", "exit code 0", fields)
    if state is BackendState.CANCELLED:
        reason = "Cancelled" if rec.cancel_requested else "CancelledInBackend"
        if (reason == "CancelledInBackend"  # Slurm's --kill-on-invalid-dep (native)
                and (bj.reason or "").partition(":")[0] == "DependencyNeverSatisfied"):
            reason = "DependencyNeverSatisfied"
        return Outcome(JobState.CANCELLED, reason, bj.native_state, fields)
    if state is BackendState.TIMEOUT:
        return Outcome(JobState.FAILED, "DeadlineExceeded",
                       "the job ran past its time limit", fields)
    reason, message = _failure(bj)
    return Outcome(JobState.FAILED, reason, message, fields)
