"""A JobSet's state as the bridge reads it (pure): the back end's view of one JobSet
(:func:`backend_job_from_jobset`), its ``replicatedJobsStatus`` as a TrainJob's
``jobsStatus``, the back-end id, and why a pod failed (:func:`container_failure`,
restarted in place or not). The JobSet itself is made by :mod:`k8s_adapter.jobset`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.backend import BackendJob, BackendRejected, BackendState
from k8s_adapter.jobset import UID_LABEL


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}


def replicated_jobs_status(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JobSet ``status.replicatedJobsStatus`` in the shape of a TrainJob's ``jobsStatus``
    (name, ready, succeeded, failed, active, suspended: counts of child Jobs)."""
    out = []
    for item in (obj.get("status") or {}).get("replicatedJobsStatus") or []:
        out.append({"name": str(item.get("name", "")),
                    **{k: int(item.get(k) or 0)
                       for k in ("ready", "succeeded", "failed", "active", "suspended")}})
    return out


def backend_job_from_jobset(obj: Mapping[str, Any], deleted: bool = False) -> BackendJob | None:
    """The engine's view of one JobSet (None if it is not one of the bridge's)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    uid = labels.get(UID_LABEL)
    if not uid:
        return None
    backend_id = f"{meta.get('namespace')}/{meta.get('name')}"
    conds = _conditions(obj)
    status = obj.get("status") or {}
    reason: str | None = None
    exit_code: int | None = None
    native = "Created"
    if "Completed" in conds:
        state, native, exit_code = BackendState.COMPLETED, "Completed", 0
    elif "Failed" in conds:
        c = conds["Failed"]
        state, native = BackendState.FAILED, "Failed"
        reason = f"{c.get('reason') or 'Failed'}: {c.get('message') or ''}".rstrip(": ")
    elif deleted or meta.get("deletionTimestamp"):
        state, native = BackendState.CANCELLED, "Deleted"
    elif "Suspended" in conds or (obj.get("spec") or {}).get("suspend"):
        state, native = BackendState.SUSPENDED, "Suspended"
    else:
        rjs = replicated_jobs_status(obj)
        if any(r["active"] or r["ready"] for r in rjs):
            state, native = BackendState.RUNNING, "Running"
        else:
            state, native, reason = BackendState.PENDING, "Pending", "JobSetCreated"
    return BackendJob(backend_id=backend_id, job_uid=uid, state=state, native_state=native,
                      exit_code=exit_code, reason=reason,
                      queue=str(meta.get("namespace") or "") or None,
                      namespace=str(meta.get("namespace") or ""),
                      start_time=None, end_time=None,
                      nodes=tuple(str(n) for n in status.get("hpcBridgeNodes") or ()))


def split_id(backend_id: str) -> tuple[str, str]:
    """``namespace/name`` → (namespace, name); raises BackendRejected when malformed."""
    namespace, sep, name = backend_id.partition("/")
    if not sep or not namespace or not name:
        raise BackendRejected(f"not a JobSet id (namespace/name): {backend_id!r}")
    return namespace, name


def container_failure(pod: Mapping[str, Any]) -> tuple[int | None, str] | None:
    """(exit code, "container NAME REASON, exit code N[: message]") of a Failed pod's
    first terminated container, or of a container that failed and was restarted in
    its pod (``restartPolicy: OnFailure``: such a pod is not Failed until its Job gives
    up, and then may be deleted before it is); None for a pod that did not fail so."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return None
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if phase != "Failed" or not term:
            last = (cs.get("lastState") or {}).get("terminated") or {}
            term = last if last.get("exitCode") not in (None, 0) else {}
        if term:
            code = term.get("exitCode")
            why = f"container {cs.get('name')} {term.get('reason') or 'Error'}, exit code {code}"
            msg = term.get("message") or ""
            return code, why + (f": {msg}" if msg else "")
    return None


def failure_message(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the first failed pod failed (container exit code, reason), for messages."""
    for pod in pods:
        failure = container_failure(pod)
        if failure is not None:
            return f"pod {(pod.get('metadata') or {}).get('name')}: {failure[1]}"
    return None
