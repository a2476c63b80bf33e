"""A stored job → the ``status`` of its TrainJob CR (pure functions).

Conditions follow Kubeflow Trainer v2.3 exactly, so that the Kubeflow SDK, ``kubectl``
and dashboards read a bridge's TrainJob as they read Trainer's. Trainer knows three
condition types, and so does the bridge:

=============  ==============================================================
type           when (``status``, ``reason``, ``message``)
=============  ==============================================================
Suspended      held: ``True``, ``Suspended``, "TrainJob is suspended" (held by Kueue:
               Kueue's reason, and its message after Trainer's);
               resumed after a hold: ``False``, ``Resumed``, "TrainJob is resumed"
Complete       succeeded: ``True``, the back end's reason (``Completed`` …), message
Failed         failed or cancelled: ``True``, the reason (``NonZeroExitCode``,
               ``Cancelled``, ``DeadlineExceeded`` …) and the message
=============  ==============================================================

A waiting or running job has no condition (or only ``Suspended=False``), as under
Trainer: the SDK then derives ``Running`` from the pods (``jobset.sigs.k8s.io/
jobset-name`` = the TrainJob's name, replicated job ``node``), which the Kubernetes back
end's JobSets have. Conditions keep Trainer's order: one keeps its place once added,
so ``.status.conditions[-1:].type`` (the ``State`` column) is the newest; one keeps its
``lastTransitionTime`` while its status does not change; a condition of another type
(the ``Created``/``Running`` an older bridge wrote) is dropped.

*Held* is what the world shows, not what was asked: a suspend not yet sent, or one the
back end refused (``SuspendRefused``), leaves the job unheld.

The bridge's richer account — why a job waits (``BackendUnavailable``, ``Priority``,
``Dependency`` …), where it was submitted, on which nodes it runs — is written as
Kubernetes Events on the TrainJob (:mod:`k8s_adapter.trainjob_events`), where Trainer's
readers do not look and ``kubectl describe`` shows it; reasons of ``Complete`` and
``Failed`` are the bridge's own (Trainer's readers read only their type and status).

``jobsStatus`` is the JobSet's ``replicatedJobsStatus`` for the Kubernetes back end,
and one entry ``node`` (the one batch job) elsewhere. A JobSet its controller has not
reported on yet (no ``replicatedJobsStatus``) leaves the counts of the previous status
(the one written before, or the object's own after a restart: the ``node`` entry of the
job while it was pending) as they were, unless the job has finished: emptied, then filled again
a moment later, they cost two status writes that said nothing. ``trainerStatus`` follows
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

__all__ = ["CONDITION_TYPES", "desired_conditions", "desired_status", "failed_status",
           "is_held", "same_status", "synthetic_jobs_status"]

FAILED_STATES = (JobState.FAILED, JobState.CANCELLED)
#: Trainer v2.3's condition types, the only ones written.
CONDITION_TYPES = ("Suspended", "Complete", "Failed")
#: Trainer's messages of the ``Suspended`` condition (pkg/constants).
SUSPENDED_MESSAGE = "TrainJob is suspended"
RESUMED_MESSAGE = "TrainJob is resumed"
#: Reasons under which a job in the back end is held there (sent or shown).
HELD_REASONS = ("Suspended", "BackendSuspended")


def _ts(at: float | None) -> str:
    moment = datetime.fromtimestamp(at, UTC) if at else datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(ctype: str, status: bool, reason: str, message: str, at: float) -> dict[str, Any]:
    return {"type": ctype, "status": "True" if status else "False",
            "reason": reason or ctype, "message": message[:32768],
            "lastTransitionTime": _ts(at)}


def is_held(rec: JobRecord) -> bool:
    """Whether ``rec`` is suspended as the world shows it (module docstring)."""
    return rec.state == JobState.SUSPENDED or (
        rec.state in (JobState.SUBMITTED, JobState.RUNNING) and rec.reason in HELD_REASONS)


def desired_conditions(rec: JobRecord, previous: Sequence[Mapping[str, Any]] | None = None,
                       kueue_hold: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """The conditions of ``rec`` (module docstring), times from the record; ``previous``
    (the TrainJob's conditions now) gives their order and whether a hold was lifted;
    ``kueue_hold``: Kueue's reason and message while it holds the job
    (:mod:`k8s_adapter.kueue_workloads`)."""
    prior = {c.get("type"): c for c in previous or [] if c.get("type") in CONDITION_TYPES}
    state = rec.state
    want: dict[str, dict[str, Any]] = {}
    if is_held(rec) and kueue_hold is not None and rec.reason in HELD_REASONS:
        reason, message = kueue_hold
        want["Suspended"] = _cond("Suspended", True, reason, f"{SUSPENDED_MESSAGE}: Kueue: "
                                  f"{message or reason}", rec.updated_at)
    elif is_held(rec):
        want["Suspended"] = _cond("Suspended", True, "Suspended", SUSPENDED_MESSAGE,
                                  rec.updated_at)
    elif "Suspended" in prior:
        if state.terminal and rec.suspend_requested:  # ended (cancelled) while held
            want["Suspended"] = dict(prior["Suspended"])
        else:  # resumed (and maybe ended since: it ran, so it was resumed)
            want["Suspended"] = _cond("Suspended", False, "Resumed", RESUMED_MESSAGE,
                                      rec.updated_at)
    end = rec.finished_at or rec.updated_at
    if state == JobState.SUCCEEDED:
        want["Complete"] = _cond("Complete", True, rec.reason or "Completed",
                                 rec.message or "completed", end)
    elif state in FAILED_STATES:
        want["Failed"] = _cond("Failed", True, rec.reason or "Failed",
                               rec.message or str(state), end)
    order = [t for t in prior if t in want] + [t for t in CONDITION_TYPES
                                               if t in want and t not in prior]
    return [want[t] for t in order]


def synthetic_jobs_status(rec: JobRecord) -> list[dict[str, Any]]:
    """One ``node`` entry counting the back end's one job, for batch back ends."""
    state = rec.state
    suspended = is_held(rec)
    return [{"name": "node",
             "active": int(state in (JobState.SUBMITTED, JobState.RUNNING) and not suspended),
             "ready": int(state == JobState.RUNNING and not suspended),
             "succeeded": int(state == JobState.SUCCEEDED),
             "failed": int(state in FAILED_STATES and rec.attempts > 0),
             "suspended": int(suspended)}]


def desired_status(rec: JobRecord, jobs_status: Sequence[Mapping[str, Any]] | None,
                   previous: Mapping[str, Any] | None,
                   reported: Mapping[str, Any] | None = None,
                   kueue_hold: tuple[str, str] | None = None) -> dict[str, Any]:
    """The whole ``status`` to write: conditions keep their previous
    ``lastTransitionTime`` when their status is unchanged; ``trainerStatus`` is what the
    job ``reported`` from inside (bridge/trainer_status.py, on any back end), and
    100 % once it succeeded (its last metrics kept); ``kueue_hold`` as for
    :func:`desired_conditions`."""
    before = (previous or {}).get("conditions") or []
    old = {c.get("type"): c for c in before}
    conditions = []
    for c in desired_conditions(rec, before, kueue_hold):
        prior = old.get(c["type"])
        if prior is not None and prior.get("status") == c["status"] and prior.get(
                "lastTransitionTime"):
            c["lastTransitionTime"] = prior["lastTransitionTime"]
        conditions.append(c)
    kept = (previous or {}).get("jobsStatus")
    if jobs_status is None:
        jobs = synthetic_jobs_status(rec)
    elif not jobs_status and kept and not rec.state.terminal:  # see the module docstring
        jobs = [dict(j) for j in kept]
    else:
        jobs = [dict(j) for j in jobs_status]
    status: dict[str, Any] = {"conditions": conditions, "jobsStatus": jobs}
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
