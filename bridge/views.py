"""The JSON views of a job that the API answers and the CLI prints.

:func:`list_view` is built from a light row (no TrainJob decoded); :func:`job_view` adds
the whole document and the transitions. A viewer who is neither the job's owner nor
root sees the document without environment values and batch script
(:func:`_redacted`), as Slurm shows another user's job but not its environment, and
its progress (``trainerStatus``) without metrics, as every listing shows it.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Protocol

from bridge.backend import Owner
from bridge.job_summary import job_summary
from bridge.model import ANN_BATCH_SCRIPT

if TYPE_CHECKING:
    from bridge.service import JobRecord, JobService
    from bridge.store_listing import ListRow


def _iso(ts: float | None) -> str | None:
    """RFC 3339 UTC to the second (``time.gmtime``: a third of ``datetime``'s cost, per
    listed job)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else None


def _hide_env_values(node: Any) -> None:
    """Hide the value of every ``env`` entry anywhere under ``node`` (the containers of
    the pod templates in ``spec.runtimePatches``), in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                for entry in value:
                    if isinstance(entry, dict) and "value" in entry:
                        entry["value"] = "(hidden)"
            else:
                _hide_env_values(value)
    elif isinstance(node, list):
        for item in node:
            _hide_env_values(item)


def _redacted(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without what only its owner may see: environment (the trainer's and
    the containers' of ``runtimePatches``) and batch script (as Slurm shows another
    user's job but not its environment or script)."""
    doc = json.loads(json.dumps(doc))
    trainer = doc.get("spec", {}).get("trainer") or {}
    if "env" in trainer:
        trainer["env"] = [{"name": e.get("name"), "value": "(hidden)"} for e in trainer["env"]]
    _hide_env_values(doc.get("spec", {}).get("runtimePatches"))
    annotations = doc.get("metadata", {}).get("annotations") or {}
    if ANN_BATCH_SCRIPT in annotations:
        annotations[ANN_BATCH_SCRIPT] = "(hidden)"
    return doc


#: What a listing shows of a job's progress report to everyone (its metrics only the
#: job's own view shows, to its owner and root: bridge/trainer_status.py).
_PROGRESS_FIELDS = ("progressPercentage", "estimatedRemainingSeconds", "lastUpdatedTime")


class _Listed(Protocol):
    """What a listed job's record (:class:`~bridge.store_records.JobRecord`) and its
    listing row (:class:`~bridge.store_listing.ListRow`) share under the same names."""

    @property
    def id(self) -> int: ...
    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> str | None: ...
    @property
    def backend_id(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def stdout_path(self) -> str | None: ...
    @property
    def stderr_path(self) -> str | None: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...
    @property
    def created_at(self) -> float | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def finished_at(self) -> float | None: ...
    @property
    def array_job_id(self) -> int | None: ...
    @property
    def array_task_id(self) -> int | None: ...


def _view(r: _Listed, user: str, unix_uid: int, state: str, nodes: list[str],
          cancel_requested: bool, placement: dict[str, Any] | None,
          summary: dict[str, Any], status: dict[str, Any] | None) -> dict[str, Any]:
    view = {
        "id": r.id,
        "uid": r.uid,
        "name": r.name,
        "namespace": r.namespace,
        "jobName": summary.get("jobName") or r.name,
        "user": user,
        "unixUid": unix_uid,
        "backend": r.backend,
        "backendId": r.backend_id,
        "state": state,
        "reason": r.reason,
        "message": r.message,
        "runtime": summary.get("runtime"),
        "numNodes": summary.get("numNodes") or 1,
        "nodes": nodes,
        "exitCode": r.exit_code,
        "partition": summary.get("partition") or r.queue,
        "timeLimitMinutes": summary.get("timeLimitMinutes"),
        "submitTime": _iso(r.created_at),
        "startTime": _iso(r.started_at),
        "endTime": _iso(r.finished_at),
        "stdout": r.stdout_path,
        "stderr": r.stderr_path,
        "cancelRequested": cancel_requested,
        "attempts": r.attempts,
        "placement": placement,
    }
    if r.array_job_id is not None:  # a task of a job array: shown as A_I
        view.update(arrayJobId=r.array_job_id, arrayTaskId=r.array_task_id,
                    arrayTasks=summary.get("array"))
    if status:
        view["trainerStatus"] = {k: status[k] for k in _PROGRESS_FIELDS if k in status}
    return view


def list_view(rec: JobRecord, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON view of a job in a listing: its row and summary, no document; with
    ``status`` (its latest progress report), ``trainerStatus`` without metrics."""
    return _view(rec, rec.owner.user, rec.owner.uid, rec.state.value, rec.nodes,
                 rec.cancel_requested, rec.placement, rec.summary or job_summary(rec.job),
                 status)


def list_view_of_row(row: ListRow, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`list_view` of the job a listing row (:mod:`bridge.store_listing`) holds:
    the same view, with no record built. (``jobs.summary`` is written with every
    document and filled by the version 4 migration; a row without one would show the
    summary's fields empty, where :func:`list_view` reads the document.)"""
    nodes = [] if row.nodes == "[]" else json.loads(row.nodes)  # most rows: none yet
    return _view(row, row.owner_user, row.owner_uid, row.state, nodes,
                 bool(row.cancel_requested),
                 json.loads(row.placement) if row.placement else None,
                 json.loads(row.summary) if row.summary else {}, status)


def job_view(rec: JobRecord, service: JobService, with_transitions: bool = False,
             viewer: Owner | None = None) -> dict[str, Any]:
    """The JSON view of one job the API and CLI share: :func:`list_view` and the
    TrainJob document (``trainJob``). A ``viewer`` who is neither the owner nor root
    sees the TrainJob without its environment values and script."""
    doc = rec.job.to_dict()
    if viewer is not None and viewer.uid not in (0, rec.owner.uid):
        doc = _redacted(doc)
    status = service.trainer_statuses([rec.id]).get(rec.id)
    view = list_view(rec, status)
    if status and (viewer is None or viewer.uid in (0, rec.owner.uid)):
        view["trainerStatus"] = status  # with its metrics
    view["trainJob"] = doc
    if with_transitions:
        view["transitions"] = [
            {"from": t.src.value if t.src else None, "to": t.dst.value, "reason": t.reason,
             "message": t.message, "at": _iso(t.at)}
            for t in service.transitions(rec.id)
        ]
    return view
