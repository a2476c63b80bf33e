"""Training progress reported from inside jobs (bridge/trainer_status.py): the latest
``trainerStatus`` of each job, and the event each report writes. Mixed into
:class:`bridge.store.Store`.

Contract: :meth:`ProgressQueries.set_trainer_status` stores a report and writes its
outbox row (``"type": "progress"``, with the job's state and the report less its
metrics) in one transaction, so a report is either visible everywhere (``tqueue``,
``tshow``, MQTT, ``/v1/events``, the TrainJob CR) or nowhere; the caller may leave the
event out (reports between two events: bridge/status_server.py). Only a job that has
not ended takes a report (:class:`JobEnded` otherwise), so a late report never follows
the job's last event. :meth:`ProgressQueries.trainer_statuses` reads many jobs' in one query.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from bridge.errors import BridgeError

__all__ = ["EVENT_PROGRESS", "JobEnded", "ProgressQueries"]

#: The ``type`` of a progress event in the outbox (bridge/events.py publishes it).
EVENT_PROGRESS = "progress"
_ENDED = ("Succeeded", "Failed", "Cancelled")


class JobEnded(BridgeError):
    """A report for a job that has ended (or does not exist)."""


class ProgressQueries:
    """The ``trainer_status`` table (mixed into the store)."""

    _db: sqlite3.Connection

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # the store's

    def _updated(self, job_id: int) -> None:
        raise NotImplementedError  # the store's: its update listeners

    def set_trainer_status(self, job_id: int, status: dict[str, Any], at: float, *,
                           event: bool = True) -> None:
        """Store ``status`` as job ``job_id``'s latest report and, with ``event``, write
        its event (without the metrics, which only the job's owner sees: the event
        stream is everyone's); without, tell the store's update listeners (the CR
        door)."""
        with self._tx() as db:
            row = db.execute("SELECT uid, namespace, name, owner_user, backend, backend_id, "
                             "state FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None or row["state"] in _ENDED:
                raise JobEnded(f"job {job_id} has ended")
            text = json.dumps(status, separators=(",", ":"), ensure_ascii=False)
            db.execute("INSERT INTO trainer_status (job_id, status, updated_at) VALUES (?,?,?) "
                       "ON CONFLICT (job_id) DO UPDATE SET status=excluded.status, "
                       "updated_at=excluded.updated_at", (job_id, text, at))
            if event:
                shown = {k: v for k, v in status.items() if k != "metrics"}
                payload = {"type": EVENT_PROGRESS, "jobId": job_id, "uid": row["uid"],
                           "namespace": row["namespace"], "name": row["name"],
                           "user": row["owner_user"], "backend": row["backend"],
                           "backendId": row["backend_id"], "state": row["state"],
                           "trainerStatus": shown, "at": at}
                db.execute("INSERT INTO outbox (job_id, event, created_at) VALUES (?,?,?)",
                           (job_id, json.dumps(payload), at))
        if not event:
            self._updated(job_id)

    def trainer_statuses(self, job_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The latest report of each of ``job_ids`` that has one."""
        found: dict[int, dict[str, Any]] = {}
        for chunk in _chunks(list(job_ids), 500):
            marks = ",".join("?" * len(chunk))
            for r in self._db.execute(f"SELECT job_id, status FROM trainer_status "
                                      f"WHERE job_id IN ({marks})", chunk):
                try:
                    found[int(r[0])] = json.loads(r[1])
                except ValueError:
                    continue  # written by this module: never; never let one row stop a view
        return found


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
