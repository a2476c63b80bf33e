"""A stored job → the ``status`` of its TrainJob CR (pure functions).

Conditions (a list-map keyed by ``type``; the current one is last, so the ``State``
column of ``kubectl get trainjobs`` — ``.status.conditions[-1:].type`` — reads right):

=============  ===========================================================
job state      conditions
=============  ===========================================================
Pending        Created=True (reason: why it waits, e.g. BackendUnavailable)
Suspended      Created=True, Suspended=True
Submitted      Created=True, Running=False (reason: Submitted / queued)
Running        Created=True, Running=True  (held: Running=False, Suspended=True)
Succeeded      Created=True, Running=False, Complete=True
Failed         Created=True, Running=False, Failed=True (reason, message)
Cancelled      Created=True, Running=False, Failed=True (reason Cancelled)
=============  ===========================================================

Upstream Trainer has no ``Running`` condition; the bridge adds it with a reason,
because "why is my job not running" is the question users ask. A condition keeps its
``lastTransitionTime`` while its status does not change.

``jobsStatus`` is the JobSet's ``replicatedJobsStatus`` for the Kubernetes back end,
and one entry ``node`` (the one batch job) elsewhere. ``trainerStatus`` follows
Trainer v2.3: what the job reports from inside (KEP-2779, on every back end), and
``progressPercentage`` 100 once complete, ``lastUpdatedTime``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bridge.states import JobState

if TYPE_CHECKING:
    from bridge.service import JobRecord

FAILED_STATES = (JobState.FAILED, JobState.CANCELLED)


def _ts(at: float | None) -> str:
    moment = datetime.fromtimestamp(at, UTC) if at else datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(ctype: str, status: bool, reason: str, message: str, at: float) -> dict[str, Any]:
    return {"type": ctype, "status": "True" if status else "False",
            "reason": reason or ctype, "message": message[:32768],
            "lastTransitionTime": _ts(at)}


def desired_conditions(rec: JobRecord) -> list[dict[str, Any]]:
    """The conditions of ``rec`` (module docstring), times from the record."""
    state = rec.state
    created_at = rec.created_at
    conds = [_cond("Created", True, "Admitted" if state != JobState.PENDING else rec.reason,
                   f"admitted by hpc-bridge to back end {rec.backend}"
                   if state != JobState.PENDING else rec.message or "waiting to be submitted",
                   created_at)]
    if state == JobState.PENDING:
        return conds
    if state == JobState.SUSPENDED:
        conds.append(_cond("Suspended", True, "Suspended", rec.message or "suspended",
                           rec.updated_at))
        return conds
    if state == JobState.SUBMITTED:
        conds.append(_cond("Running", False, rec.reason or "Submitted", rec.message,
                           rec.updated_at))
        if rec.reason in ("Suspended", "BackendSuspended"):  # held before it started
            conds.append(_cond("Suspended", True, "Suspended", rec.message, rec.updated_at))
        return conds
    if state == JobState.RUNNING:
        # What the world shows, not what was asked: a suspend not yet sent, or one the
        # back end refused, leaves the job running.
        held = rec.reason in ("Suspended", "BackendSuspended")
        running_since = rec.started_at or rec.updated_at
        if held:
            conds.append(_cond("Running", False, "Suspended", rec.message, rec.updated_at))
            conds.append(_cond("Suspended", True, "Suspended", rec.message, rec.updated_at))
        else:
            conds.append(_cond("Running", True, "Running", rec.message, running_since))
        return conds
    end = rec.finished_at or rec.updated_at
    conds.append(_cond("Running", False, rec.reason, "the job has finished", end))
    if state == JobState.SUCCEEDED:
        conds.append(_cond("Complete", True, rec.reason or "Completed",
                           rec.message or "completed", end))
    else:
        conds.append(_cond("Failed", True, rec.reason or "Failed",
                           rec.message or str(state), end))
    return conds


def synthetic_jobs_status(rec: JobRecord) -> list[dict[str, Any]]:
    """One ``node`` entry counting the back end's one job, for batch back ends."""
    state = rec.state
    in_backend = state in (JobState.SUBMITTED, JobState.RUNNING)
    suspended = state == JobState.SUSPENDED or (
        in_backend and rec.reason in ("Suspended", "BackendSuspended"))
    return [{"name": "node",
             "active": int(state in (JobState.SUBMITTED, JobState.RUNNING) and not suspended),
             "ready": int(state == JobState.RUNNING and not suspended),
             "succeeded": int(state == JobState.SUCCEEDED),
             "failed": int(state in FAILED_STATES and rec.attempts > 0),
             "suspended": int(suspended)}]


def desired_status(rec: JobRecord, jobs_status: Sequence[Mapping[str, Any]] | None,
                   previous: Mapping[str, Any] | None,
                   reported: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole ``status`` to write: conditions keep their previous
    ``lastTransitionTime`` when their status is unchanged; ``trainerStatus`` is what the
    job ``reported`` from inside (bridge/trainer_status.py, on any back end), and
    100 % once it succeeded (its last metrics kept)."""
    old = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    conditions = []
    for c in desired_conditions(rec):
        prior = old.get(c["type"])
        if prior is not None and prior.get("status") == c["status"] and prior.get(
                "lastTransitionTime"):
            c["lastTransitionTime"] = prior["lastTransitionTime"]
        conditions.append(c)
    status: dict[str, Any] = {
        "conditions": conditions,
        "jobsStatus": [dict(j) for j in jobs_status] if jobs_status is not None
        else synthetic_jobs_status(rec),
    }
    trainer: dict[str, Any] = dict(reported or {})
    if rec.state == JobState.SUCCEEDED:
        trainer["progressPercentage"] = 100
        trainer["estimatedRemainingSeconds"] = 0
        trainer["lastUpdatedTime"] = _ts(rec.finished_at or rec.updated_at)
    if trainer:
        trainer.setdefault("lastUpdatedTime", _ts(rec.updated_at))
        status["trainerStatus"] = trainer
    return status


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two statuses say the same (what a write would change)."""
    def norm(s: Mapping[str, Any] | None) -> Any:
        s = s or {}
        return ({c.get("type"): (c.get("status"), c.get("reason"), c.get("message"))
                 for c in s.get("conditions") or []},
                sorted((sorted(j.items()) for j in s.get("jobsStatus") or []), key=str),
                sorted((s.get("trainerStatus") or {}).items()))
    return bool(norm(a) == norm(b))


def failed_status(message: str, reason: str, previous: Mapping[str, Any] | None,
                  ) -> dict[str, Any]:
    """The status of a TrainJob the bridge refused (never admitted)."""
    old = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    prior = old.get("Failed")
    cond = _cond("Failed", True, reason, message, 0)
    if prior is not None and prior.get("status") == "True" and prior.get("lastTransitionTime"):
        cond["lastTransitionTime"] = prior["lastTransitionTime"]
    return {"conditions": [cond], "jobsStatus": []}
