"""Kubernetes Events on a TrainJob, one for each change of its job (pure functions).

Trainer's conditions say little while a job waits or runs (k8s_adapter/status.py); the
bridge says the rest as core/v1 Events on the TrainJob, the way controllers do, so that
``kubectl describe trainjob``, ``kubectl events --for trainjob/NAME`` and the Kubeflow
SDK's ``get_job_events`` show it:

===========  ==============================  =======================================
job          event reason                    message
===========  ==============================  =======================================
Pending      ``Admitted`` (newly admitted),  "admitted as job N for back end B", or
             else the reason it waits        why it waits (the engine's message)
             (``BackendUnavailable``,
             ``Priority``, ``Dependency`` …)
Suspended    ``Suspended``                   the engine's message
Submitted    ``Submitted``, or the hold's     "submitted to B as ID" …
             reason (``Suspended``,
             ``BackendSuspended``) when held
             before it started
Running      ``Running``, ``Suspended``,     the engine's message; nodes when known
             ``SuspendRefused``
Succeeded    ``Completed`` (the reason)      the engine's message
Failed       the reason                      the engine's message
Cancelled    ``Cancelled``                   the engine's message
===========  ==============================  =======================================

Contract:

* :func:`event_key` is what makes an event: the job's state and reason. One event is
  recorded per change of key (the front door remembers the last key of each job and
  limits how often a reason alone may change it: k8s_adapter/frontdoor.py, item 7).
* :func:`event_body` is the Event to create: ``involvedObject`` the TrainJob (its uid),
  ``firstTimestamp``/``lastTimestamp`` set (the SDK reads events by
  ``firstTimestamp``), ``source.component`` and ``reportingComponent``
  ``hpc-bridge``, a generated name (``<trainjob>.`` plus the apiserver's suffix), type
  ``Warning`` for a failure or a refusal and ``Normal`` otherwise, the message at most
  1 KiB.
* Events are best effort, as Kubernetes makes them (they expire after an hour): a
  failed write is logged and not retried; status conditions, not events, are the
  record a reader may rely on.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bridge.model import GROUP, VERSION
from bridge.states import JobState

if TYPE_CHECKING:
    from bridge.service import JobRecord

__all__ = ["COMPONENT", "event_body", "event_key", "event_reason"]

COMPONENT = "hpc-bridge"
MAX_MESSAGE = 1024
#: Reasons recorded as ``Warning`` whatever the state.
WARNING_REASONS = frozenset({"BackendUnavailable", "SuspendRefused", "DependencyNeverSatisfied",
                             "BackendRejected"})


def event_key(rec: JobRecord) -> tuple[str, str]:
    """What an event stands for: the job's state and reason."""
    return (rec.state.value, rec.reason)


def event_reason(rec: JobRecord) -> str:
    """The event's reason (module docstring's table)."""
    if rec.state == JobState.PENDING and rec.reason in ("", "Created"):
        return "Admitted"
    if rec.state == JobState.SUCCEEDED:
        return rec.reason or "Completed"
    return rec.reason or rec.state.value


def _message(rec: JobRecord) -> str:
    if rec.state == JobState.PENDING and rec.reason in ("", "Created"):
        return f"admitted as job {rec.id} for back end {rec.backend}"
    text = rec.message or f"job {rec.id} is {rec.state.value.lower()}"
    if rec.state == JobState.SUBMITTED and rec.backend_id and rec.backend_id not in text:
        text += f" ({rec.backend} job {rec.backend_id})"
    if rec.state == JobState.RUNNING and rec.nodes and not any(n in text for n in rec.nodes):
        text += f" on {','.join(rec.nodes[:16])}" + (" …" if len(rec.nodes) > 16 else "")
    return text


def event_body(rec: JobRecord, trainjob: Mapping[str, Any], instance: str,
               now: float) -> dict[str, Any]:
    """The core/v1 Event recording ``rec``'s current state on ``trainjob``."""
    meta = trainjob.get("metadata") or {}
    reason = event_reason(rec)
    warning = rec.state == JobState.FAILED or reason in WARNING_REASONS
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name')}.",
                     "namespace": meta.get("namespace")},
        "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob",
                           "name": meta.get("name"), "namespace": meta.get("namespace"),
                           "uid": meta.get("uid"),
                           "resourceVersion": meta.get("resourceVersion")},
        "reason": reason[:128],
        "message": _message(rec)[:MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT, "reportingInstance": instance[:128],
    }
