"""The job state machine.

::

    Pending ──▶ Submitted ──▶ Running ──▶ Succeeded
       │  ▲         │            │    └─▶ Failed
       ▼  │         ├────────────┴──────▶ Cancelled
    Suspended       └─▶ Failed / Succeeded (a job can finish between two polls)

Every state change goes through :func:`check_transition`, which raises
:class:`IllegalTransition` for a change the machine does not allow. Terminal states
never change again. A transition always carries a ``reason`` in the Kubernetes
style (``CamelCase``, e.g. ``BackendUnavailable``, ``NonZeroExitCode``).
"""

from __future__ import annotations

from enum import StrEnum

from bridge.errors import BridgeError


class JobState(StrEnum):
    PENDING = "Pending"
    SUSPENDED = "Suspended"
    SUBMITTED = "Submitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """Known to the back end and not finished."""
        return self in (JobState.SUBMITTED, JobState.RUNNING)


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
#: The states of a job not yet finished, in the order a job moves through them.
LIVE = (JobState.PENDING, JobState.SUSPENDED, JobState.SUBMITTED, JobState.RUNNING)

_ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset(
        {JobState.SUBMITTED, JobState.SUSPENDED, JobState.FAILED, JobState.CANCELLED,
         JobState.RUNNING, JobState.SUCCEEDED}
    ),
    JobState.SUSPENDED: frozenset({JobState.PENDING, JobState.CANCELLED, JobState.FAILED}),
    JobState.SUBMITTED: frozenset(
        {JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalTransition(BridgeError, ValueError):
    """A state change the machine does not allow."""


def allowed(src: JobState, dst: JobState) -> bool:
    """Whether ``src -> dst`` is a legal change (staying in the same state is not a change)."""
    return dst in _ALLOWED[src]


def check_transition(src: JobState, dst: JobState) -> None:
    """Raise :class:`IllegalTransition` unless ``src -> dst`` is allowed."""
    if not allowed(src, dst):
        raise IllegalTransition(f"illegal job state change {src} -> {dst}")


#: Kubernetes-style condition type written for each state (TrainJob ``status.conditions``).
CONDITION_FOR_STATE: dict[JobState, str] = {
    JobState.PENDING: "Created",
    JobState.SUSPENDED: "Suspended",
    JobState.SUBMITTED: "Created",
    JobState.RUNNING: "Running",
    JobState.SUCCEEDED: "Complete",
    JobState.FAILED: "Failed",
    JobState.CANCELLED: "Failed",
}
