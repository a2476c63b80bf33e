"""The JSON views of a job that the API answers and the CLI prints.

:func:`list_view` is built from a light row (no TrainJob decoded); :func:`job_view` adds
the whole document and the transitions. A viewer who is neither the job's owner nor
root sees the document without environment values and batch script
(:func:`_redacted`), as Slurm shows another user's job but not its environment, and
its progress (``trainerStatus``) without metrics, as every listing shows it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bridge.backend import Owner
from bridge.job_summary import job_summary
from bridge.model import ANN_BATCH_SCRIPT

if TYPE_CHECKING:
    from bridge.service import JobRecord, JobService


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts else None


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


def list_view(rec: JobRecord, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON view of a job in a listing: its row and summary, no document; with
    ``status`` (its latest progress report), ``trainerStatus`` without metrics."""
    summary = rec.summary or job_summary(rec.job)
    view = {
        "id": rec.id,
        "uid": rec.uid,
        "name": rec.name,
        "namespace": rec.namespace,
        "jobName": summary.get("jobName") or rec.name,
        "user": rec.owner.user,
        "unixUid": rec.owner.uid,
        "backend": rec.backend,
        "backendId": rec.backend_id,
        "state": rec.state.value,
        "reason": rec.reason,
        "message": rec.message,
        "runtime": summary.get("runtime"),
        "numNodes": summary.get("numNodes") or 1,
        "nodes": rec.nodes,
        "exitCode": rec.exit_code,
        "partition": summary.get("partition") or rec.queue,
        "timeLimitMinutes": summary.get("timeLimitMinutes"),
        "submitTime": _iso(rec.created_at),
        "startTime": _iso(rec.started_at),
        "endTime": _iso(rec.finished_at),
        "stdout": rec.stdout_path,
        "stderr": rec.stderr_path,
        "cancelRequested": rec.cancel_requested,
        "attempts": rec.attempts,
        "placement": rec.placement,
    }
    if rec.array_job_id is not None:  # a task of a job array: shown as A_I
        view.update(arrayJobId=rec.array_job_id, arrayTaskId=rec.array_task_id,
                    arrayTasks=summary.get("array"))
    if status:
        view["trainerStatus"] = {k: status[k] for k in _PROGRESS_FIELDS if k in status}
    return view


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
