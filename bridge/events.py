"""Job events as published: the payload of an outbox row and the MQTT messages of a
batch (pure functions; :mod:`bridge.publisher` sends them, docs/events.md documents them).

Every state change writes an outbox row in the same transaction (:mod:`bridge.store`);
its sequence number is the event's ``id``. The payload (JSON, UTF-8)::

    {"id": 42, "type": "transition", "time": "2026-12-01T05:01:02.345Z",
     "jobId": 7, "uid": "...", "namespace": "default", "name": "train", "user": "alice",
     "backend": "slurm", "backendId": "1234", "from": "Submitted", "state": "Running",
     "reason": "Started", "message": "", "exitCode": null}

A progress report from inside the job (bridge/trainer_status.py) is an event too, at
most every ``event_interval`` seconds per job, without the report's metrics (the
stream is everyone's; the metrics are the job owner's)::

    {"id": 43, "type": "progress", "time": "...", "jobId": 7, "uid": "...",
     "namespace": "default", "name": "train", "user": "alice", "backend": "slurm",
     "backendId": "1234", "state": "Running",
     "trainerStatus": {"progressPercentage": 45, "estimatedRemainingSeconds": 795,
                       "lastUpdatedTime": "2026-12-01T05:01:02Z"}}

Topics: ``<prefix>/jobs/<jobId>/events`` (every event, not retained) and
``<prefix>/jobs/<jobId>/state`` (retained: the job's latest event, a transition or a
progress report, each with the job's ``state``). Both QoS 1.

Ordering contract of :func:`plan_batch` and :func:`acked_prefix`: the messages of a batch
are sent in sequence order over one connection, and only the events of the longest
prefix of the batch whose messages were all acknowledged count as published. The broker
receives a prefix of what was sent (TCP), so a lost acknowledgement or connection makes
events repeat later (same ``id``), never arrive out of order per job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bridge.outbox import Event
from bridge.store_progress import EVENT_PROGRESS

EVENT_TRANSITION = "transition"


def iso_time(ts: float) -> str:
    """RFC 3339 UTC with milliseconds (``2026-12-01T05:01:02.345Z``)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def event_payload(event: Event) -> dict[str, Any]:
    """The published form of an outbox row (see the module's documentation)."""
    p = event.payload
    if p.get("type") == EVENT_PROGRESS:
        return {
            "id": event.id, "type": EVENT_PROGRESS, "time": iso_time(float(p["at"])),
            "jobId": event.job_id, "uid": p.get("uid"), "namespace": p.get("namespace"),
            "name": p.get("name"), "user": p.get("user"), "backend": p.get("backend"),
            "backendId": p.get("backendId"), "state": p.get("state"),
            "trainerStatus": p.get("trainerStatus"),
        }
    return {
        "id": event.id, "type": EVENT_TRANSITION, "time": iso_time(float(p["at"])),
        "jobId": event.job_id, "uid": p.get("uid"), "namespace": p.get("namespace"),
        "name": p.get("name"), "user": p.get("user"), "backend": p.get("backend"),
        "backendId": p.get("backendId"), "from": p.get("from"), "state": p.get("to"),
        "reason": p.get("reason", ""), "message": p.get("message", ""),
        "exitCode": p.get("exitCode"),
    }


def state_topic(prefix: str, job_id: int) -> str:
    return f"{prefix}/jobs/{job_id}/state"


def events_topic(prefix: str, job_id: int) -> str:
    return f"{prefix}/jobs/{job_id}/events"


@dataclass(frozen=True)
class Message:
    """One MQTT message of a batch; ``index`` is its event's position in the batch."""

    topic: str
    payload: bytes
    retain: bool
    index: int


def plan_batch(prefix: str, events: Sequence[Event]) -> list[Message]:
    """The messages for ``events`` (in sequence order): each event on its job's events
    topic, and after the last event of each job in the batch, that event again on the
    job's retained state topic (earlier states of the batch would be overwritten at
    once)."""
    last_of_job = {event.job_id: i for i, event in enumerate(events)}
    messages: list[Message] = []
    for i, event in enumerate(events):
        body = json.dumps(event_payload(event), separators=(",", ":")).encode()
        messages.append(Message(events_topic(prefix, event.job_id), body, False, i))
        if last_of_job[event.job_id] == i:
            messages.append(Message(state_topic(prefix, event.job_id), body, True, i))
    return messages


def acked_prefix(events: Sequence[Event], messages: Sequence[Message],
                 acked: Sequence[bool]) -> list[int]:
    """The ids of the events that count as published: those of the longest prefix of
    ``events`` whose every message was acknowledged (``acked[k]`` for ``messages[k]``)."""
    failed = [m.index for m, ok in zip(messages, acked, strict=True) if not ok]
    cut = min(failed, default=len(events))
    return [event.id for event in events[:cut]]
