"""What the engine hands a back end for one stored job: its :class:`SubmitRequest`.

Contract: :func:`stored_shape` is the job's shape as stored at admission (its runtime
snapshot), resolved again only for a row without one (admitted by an older daemon) or
with one that no longer reads; :class:`bridge.model.ValidationError` when such a row no
longer resolves. :func:`submit_request` builds the request from the stored job, the
placement decision (its options, and its hosts when it pins them) and the dependency in
the back end's own ids (bridge/engine_dependency.py ``DependencyGate.native``), and
where the job reports its progress (:func:`report_env`).
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from bridge.backend import SubmitRequest
from bridge.engine_array import array_task
from bridge.placement_decision import PlacementDecision
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import scheduling_of
from bridge.shape import JobShape, resolve_shape
from bridge.store import JobRecord
from bridge.trainer_status import ReportSettings

__all__ = ["report_env", "stored_shape", "submit_request"]

log = structlog.get_logger("hpc_bridge.engine")


def stored_shape(rec: JobRecord, catalog: RuntimeCatalog) -> JobShape:
    """The job's shape (module docstring)."""
    try:  # the stored text is decoded here, on first use (JSONDecodeError is a ValueError)
        if rec.shape is not None:
            return JobShape.from_json(rec.shape)
    except ValueError as exc:
        log.warning("stored job shape unreadable; resolving it again",
                    job_id=rec.id, error=str(exc))
    return resolve_shape(rec.job, catalog.resolve(rec.job, rec.origin), scheduling_of(rec.job))


def report_env(rec: JobRecord, reports: ReportSettings | None, backend: object
               ) -> tuple[dict[str, str], dict[str, str]]:
    """Where ``rec`` reports its progress (bridge/trainer_status.py): the variables of a
    job that reads the daemon host's files (its token file written), or what a back end
    that runs pods mounts (``runs_pods``: ``SubmitRequest.status_secret``). Both empty
    when reports are off or the token or CA cannot be read or written (logged: a job
    never fails for want of them)."""
    if reports is None:
        return {}, {}
    try:
        if getattr(backend, "runs_pods", False):
            return {}, reports.secret_for(rec.uid, rec.namespace, rec.name)
        return reports.env_for(rec.uid, rec.namespace, rec.name, rec.owner), {}
    except (OSError, ValueError) as exc:
        log.warning("progress token not handed over; the job cannot report progress",
                    job_id=rec.id, error=str(exc))
        return {}, {}


def submit_request(rec: JobRecord, catalog: RuntimeCatalog,
                   decision: PlacementDecision | None, dependency: str | None,
                   report: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {})
                   ) -> SubmitRequest:
    """The request for ``rec`` (module docstring)."""
    shape = stored_shape(rec, catalog)
    options = scheduling_of(rec.job)
    if options.time_limit_minutes is None and shape.time_limit_minutes is not None:
        options = options.model_copy(update={"time_limit_minutes": shape.time_limit_minutes})
    if decision is not None and decision.options:
        options = options.model_copy(update=dict(decision.options))
    pinned = decision.placement if decision is not None and decision.pin else None
    return SubmitRequest(job_uid=rec.uid, job_id=rec.id, job=rec.job, plan=shape.plan,
                         options=options, owner=rec.owner, placement=pinned, shape=shape,
                         array=array_task(rec), dependency=dependency,
                         status_env=dict(report[0]), status_secret=dict(report[1]))
