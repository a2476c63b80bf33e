"""A stored job as the store answers it: :class:`JobRecord` (one row of ``jobs``,
decoded, its TrainJob read on first use) and :class:`Transition` (one state change),
and how a row becomes a record. Only :mod:`bridge.store` makes them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from bridge.backend import Owner
from bridge.model import TrainJob, load_document
from bridge.states import JobState

__all__ = ["LIGHT_COLUMNS", "JobRecord", "Transition", "row_to_record"]


@dataclass
class JobRecord:
    """One row of ``jobs``, decoded; the TrainJob (:attr:`job`) on first use."""

    id: int
    uid: str
    namespace: str
    name: str
    owner: Owner
    backend: str
    origin: str
    state: JobState
    reason: str
    message: str
    backend_id: str | None
    exit_code: int | None
    nodes: list[str]
    stdout_path: str | None
    stderr_path: str | None
    queue: str | None
    attempts: int
    submitting_since: float | None
    next_attempt_at: float
    cancel_requested: bool
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    #: The engine's placement decision (JSON object), if it made one.
    placement: dict[str, Any] | None = None
    #: The client's idempotency key of the submission that made the job, and the
    #: SHA-256 (hex) of that request's body.
    idempotency_key: str | None = None
    request_digest: str | None = None
    #: :func:`job_summary` of the document.
    summary: dict[str, Any] = field(default_factory=dict)
    #: The job's shape as stored at admission (JSON text of
    #: :meth:`bridge.shape.JobShape.to_json`; :attr:`shape` decodes it on first use, so
    #: a listing never pays for it); None for a row an older daemon wrote.
    shape_json: str | None = None
    #: The stored document (JSON text), or None when the row was read without it ...
    document: str | None = field(default=None, repr=False, compare=False)
    #: ... and then how to read it.
    load_document: Callable[[], str] | None = field(default=None, repr=False, compare=False)
    #: A task of a job array (bridge/arrays.py): the array's job id (the first task's
    #: own id) and this task's index; None for a plain job.
    array_job_id: int | None = None
    array_task_id: int | None = None
    #: A hold in its back end's queue (bridge/engine_hold.py): ``JobHeldUser`` or
    #: ``JobHeldAdmin`` while asked, ``Released``/``ReleasedAdmin`` until the release
    #: is sent; None otherwise.
    held: str | None = None

    @property
    def display_id(self) -> str:
        """The id users see: ``A_I`` for a task of an array, else the job's id."""
        if self.array_job_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)

    @cached_property
    def job(self) -> TrainJob:
        """The TrainJob, decoded (and read, for a listed row) on first use; the same
        object afterwards (changes to it are saved with :meth:`Store.save_document`)."""
        text = self.document
        if text is None:
            assert self.load_document is not None
            text = self.load_document()
        doc = load_document(json.loads(text))
        assert isinstance(doc, TrainJob)
        return doc

    @cached_property
    def shape(self) -> dict[str, Any] | None:
        """The stored shape, decoded (None without one)."""
        return json.loads(self.shape_json) if self.shape_json else None

    @property
    def suspend_requested(self) -> bool:
        """The document's ``spec.suspend``, without decoding the document."""
        if "suspend" in self.summary:
            return bool(self.summary["suspend"])
        return bool(self.job.spec.suspend)


@dataclass(frozen=True)
class Transition:
    src: JobState | None
    dst: JobState
    reason: str
    message: str
    at: float


#: Every column of ``jobs`` but the document (what listings read).
LIGHT_COLUMNS = (
    "id, uid, namespace, name, owner_uid, owner_gid, owner_user, backend, origin, state, "
    "reason, message, backend_id, exit_code, nodes, stdout_path, stderr_path, queue, "
    "attempts, submitting_since, next_attempt_at, cancel_requested, created_at, updated_at, "
    "started_at, finished_at, placement, summary, shape, idempotency_key, request_digest, "
    "array_job_id, array_task_id, held")


def row_to_record(row: sqlite3.Row,
                   load: Callable[[int], str] | None = None) -> JobRecord:
    """A record from a row; a row without ``document`` needs ``load`` (id -> text)."""
    keys = row.keys()
    document = row["document"] if "document" in keys else None
    job_id = row["id"]
    loader = (lambda: load(job_id)) if document is None and load is not None else None
    return JobRecord(
        id=row["id"],
        uid=row["uid"],
        namespace=row["namespace"],
        name=row["name"],
        owner=Owner(uid=row["owner_uid"], gid=row["owner_gid"], user=row["owner_user"]),
        backend=row["backend"],
        origin=row["origin"],
        state=JobState(row["state"]),
        reason=row["reason"],
        message=row["message"],
        backend_id=row["backend_id"],
        exit_code=row["exit_code"],
        nodes=json.loads(row["nodes"]),
        stdout_path=row["stdout_path"],
        stderr_path=row["stderr_path"],
        queue=row["queue"],
        attempts=row["attempts"],
        submitting_since=row["submitting_since"],
        next_attempt_at=row["next_attempt_at"],
        cancel_requested=bool(row["cancel_requested"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        placement=json.loads(row["placement"]) if row["placement"] else None,
        idempotency_key=row["idempotency_key"],
        request_digest=row["request_digest"],
        summary=json.loads(row["summary"]) if row["summary"] else {},
        shape_json=row["shape"],
        document=document,
        load_document=loader,
        array_job_id=row["array_job_id"],
        array_task_id=row["array_task_id"],
        held=row["held"] if "held" in keys else None,
    )
