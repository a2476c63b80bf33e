"""The durable store: SQLite in WAL mode.

Tables:

* ``jobs`` — one row per TrainJob: the document, owner, back end, state, the back-end
  id, and the submission bookkeeping (attempts, ``submitting_since``, next attempt).
  ``placement`` is the engine's placement decision as JSON (hosts, domains per level,
  mode; see :mod:`bridge.placement`), or NULL. A task of a job array is a row of its
  own with ``array_job_id``/``array_task_id`` (version 5; the queries of arrays are in
  :class:`bridge.store_arrays.ArrayQueries`). Rows are answered as
  :class:`bridge.store_records.JobRecord`.
* ``transitions`` — every state change with its reason and time.
* ``outbox`` — every state change as an event (MQTT, ``/v1/events``, metrics); the
  publisher reads :meth:`Store.pending_events` and marks them :meth:`Store.mark_published`
  (more queries of it in :class:`bridge.outbox.OutboxQueries`).

Contract: every method is one transaction. A state change, its transition row and
its outbox row are written together or not at all, so a daemon killed at any
instant restarts into exactly the state it had (SQLite WAL survives a killed
process with ``synchronous=NORMAL``; ``durable=True`` selects ``FULL`` for power loss).

The store is synchronous on purpose: every call is a few small indexed statements
(well under a millisecond); the engine calls it from the event loop, and only from
the thread that runs it (one connection; SQLite transactions are per connection, so
another thread's statements would land inside this one's transaction).

Light reads: listings (:meth:`Store.list_jobs`, :meth:`Store.by_uids`) do not read the
TrainJob document (the API's listing reads fewer columns still, as plain rows:
:mod:`bridge.store_listing`); a record's :attr:`JobRecord.job` is read and decoded on first use.
What a listing shows from the document (job name, partition, time limit, runtime, node
count, ``spec.suspend``) is kept beside it in ``jobs.summary`` (version 4), written
with the document.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from bridge.backend import Owner
from bridge.errors import BridgeError
from bridge.job_summary import job_summary, suspend_wanted
from bridge.model import TrainJob
from bridge.outbox import Event, OutboxQueries
from bridge.refs import resolve
from bridge.schema import SCHEMA_SQL, SUSPEND_WORK, SchemaTooNew, check_version, migrate
from bridge.states import TERMINAL, JobState, check_transition
from bridge.store_arrays import NOT_DUE, ArrayQueries, ArrayTaskRow, parse_task_ref
from bridge.store_listing import ListingQueries, job_filters
from bridge.store_progress import ProgressQueries
from bridge.store_records import LIGHT_COLUMNS, row_to_record
from bridge.store_records import JobRecord as JobRecord
from bridge.store_records import Transition as Transition

log = structlog.get_logger(__name__)


class DuplicateJob(BridgeError, ValueError):
    """A job with the same uid exists, or an unfinished job of the same owner with the
    same namespace/name (or the owner's idempotency key)."""


class JobNotFound(BridgeError, KeyError):
    """No job matches the reference."""


class Store(OutboxQueries, ArrayQueries, ProgressQueries, ListingQueries):
    """SQLite-backed job store. Open with :meth:`open`; one instance per process."""

    def __init__(self, conn: sqlite3.Connection):
        self._db = conn
        #: Called with a job's id after each committed change that writes no outbox
        #: row (a change within a state: reason, message, bookkeeping, the document),
        #: in this process (:meth:`bridge.service.JobService.updates`).
        self.update_listeners: list[Callable[[int], None]] = []
        #: Called (no arguments) after each transaction of :meth:`_tx` commits (every
        #: outbox row is written in one; ``prune_events`` deletes without one), in the
        #: thread that committed it (:class:`bridge.feed.EventFeed` looks at the outbox then,
        #: rather than polling it). A listener must be quick; what it raises is
        #: logged, never the writer's.
        self.commit_listeners: list[Callable[[], None]] = []

    def _updated(self, job_id: int) -> None:
        for listener in list(self.update_listeners):
            listener(job_id)

    @classmethod
    def open(cls, path: str | Path, *, durable: bool = False) -> Store:
        """Open (creating if needed) the database at ``path`` (``:memory:`` for tests),
        migrating an older schema; :class:`SchemaTooNew` for a newer one."""
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=5000")
        try:
            check_version(conn, path)
        except SchemaTooNew:
            conn.close()
            raise
        conn.executescript(SCHEMA_SQL)
        migrate(conn)
        return cls(conn)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")
            for listener in list(self.commit_listeners):
                try:
                    listener()
                except Exception:  # the write is done: its caller must not see this
                    log.exception("a commit listener failed")

    # -- writing -----------------------------------------------------------------

    def add(self, job: TrainJob, owner: Owner, backend: str, *, origin: str = "api",
            state: JobState = JobState.PENDING, reason: str = "Created",
            message: str = "", idempotency_key: str | None = None,
            request_digest: str | None = None, document: str | None = None,
            summary: dict[str, Any] | None = None,
            shape: dict[str, Any] | None = None,
            tasks: Sequence[ArrayTaskRow] = ()) -> JobRecord:
        """Insert a new job (its metadata must carry uid, namespace and name).

        ``idempotency_key`` is unique per owner: a second job with the owner's key is a
        :class:`DuplicateJob` (find the first with :meth:`by_idempotency_key`).
        ``document`` and ``summary``, when given, must be ``json.dumps(job.to_dict())``
        and :func:`job_summary` of ``job`` (made off the event loop by the caller);
        ``shape``: the job's :class:`bridge.shape.JobShape` (stored form).

        ``tasks``: the job is an array (bridge/arrays.py); one row per task, each with
        its own uid, name and document (``job`` is not stored), all in this one
        transaction, the first task's id being every task's ``array_job_id``. The
        first task's record is returned."""
        now = time.time()
        meta = job.metadata
        assert meta.uid and meta.namespace and meta.name, "job identity not set"
        if document is None:
            document = json.dumps(job.to_dict())
        rows = list(tasks) or [ArrayTaskRow(None, meta.uid, meta.name, document)]
        summary = summary or job_summary(job)
        summary_text, wanted = json.dumps(summary), suspend_wanted(summary)
        shape_text = json.dumps(shape) if shape is not None else None
        first: int | None = None
        try:
            with self._tx() as db:
                for row in rows:
                    waits = bool(row.waiting) and state is JobState.PENDING
                    row_reason = row.waiting if waits and row.waiting else reason
                    cur = db.execute(
                        "INSERT INTO jobs (uid, namespace, name, owner_uid, owner_gid,"
                        " owner_user, backend, origin, document, state, reason, message,"
                        " created_at, updated_at, idempotency_key, request_digest, summary,"
                        " shape, array_job_id, array_task_id, next_attempt_at, suspend_wanted)"
                        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (row.uid, meta.namespace, row.name, owner.uid, owner.gid, owner.user,
                         backend, origin, row.document, state.value, row_reason, message,
                         now, now, idempotency_key if first is None else None,
                         request_digest if first is None else None, summary_text,
                         shape_text, first, row.index, NOT_DUE if waits else 0, wanted),
                    )
                    job_id = cur.lastrowid
                    assert job_id is not None
                    if first is None:
                        first = job_id
                        if row.index is not None:
                            db.execute("UPDATE jobs SET array_job_id=? WHERE id=?",
                                       (job_id, job_id))
                    self._record(db, job_id, None, state, row_reason, message, now)
        except sqlite3.IntegrityError as exc:
            named = (f"{meta.namespace}/{meta.name}" if not tasks else
                     f"{meta.namespace}/{rows[0].name} … {rows[-1].name} (the array's tasks)")
            raise DuplicateJob(
                f"{owner.user} has an unfinished job named {named} "
                f"(or a job with uid {meta.uid} exists)"
            ) from exc
        assert first is not None
        return self.get(first)

    def _record(self, db: sqlite3.Connection, job_id: int, src: JobState | None,
                dst: JobState, reason: str, message: str, at: float) -> None:
        db.execute(
            "INSERT INTO transitions (job_id, src, dst, reason, message, at) VALUES (?,?,?,?,?,?)",
            (job_id, src.value if src else None, dst.value, reason, message, at),
        )
        row = db.execute("SELECT uid, namespace, name, backend, backend_id, exit_code, "
                         "owner_user, array_job_id, array_task_id FROM jobs WHERE id=?",
                         (job_id,)).fetchone()
        event = {
            "jobId": job_id, "uid": row["uid"], "namespace": row["namespace"],
            "name": row["name"], "user": row["owner_user"], "backend": row["backend"],
            "backendId": row["backend_id"], "from": src.value if src else None,
            "to": dst.value, "reason": reason, "message": message,
            "exitCode": row["exit_code"], "at": at,
        }
        if row["array_job_id"] is not None:  # a task of an array: A and I beside its id
            event.update(arrayJobId=row["array_job_id"], arrayTaskId=row["array_task_id"])
        db.execute("INSERT INTO outbox (job_id, event, created_at) VALUES (?,?,?)",
                   (job_id, json.dumps(event), at))

    def transition(self, job_id: int, dst: JobState, reason: str, message: str = "",
                   **fields: Any) -> JobRecord:
        """Change state (checked against the state machine) and set ``fields`` atomically.

        ``fields`` may be any of: backend_id, exit_code, nodes, stdout_path, stderr_path,
        queue, started_at, finished_at, attempts, submitting_since, next_attempt_at,
        placement (a JSON-able dict, or None).
        Staying in the same state only updates the fields (and reason/message if given).
        """
        done = self._transition(job_id, None, dst, reason, message, fields)
        assert done is not None
        return done

    def transition_from(self, job_id: int, expect: JobState, dst: JobState, reason: str,
                        message: str = "", **fields: Any) -> JobRecord | None:
        """:meth:`transition`, only if the job is in state ``expect`` when it is made (in
        the same transaction); ``None`` when it is not (something else changed it since
        the caller read it: a hold, a cancel)."""
        return self._transition(job_id, expect, dst, reason, message, fields)

    def _transition(self, job_id: int, expect: JobState | None, dst: JobState, reason: str,
                    message: str, fields: dict[str, Any]) -> JobRecord | None:
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            src = JobState(row["state"])
            if expect is not None and src != expect:
                return None
            if src != dst:
                check_transition(src, dst)
                if dst.terminal and "finished_at" not in fields:
                    fields["finished_at"] = now
            self._update(db, job_id, state=dst.value, reason=reason, message=message,
                         updated_at=now, **fields)
            if src != dst:
                self._record(db, job_id, src, dst, reason, message, now)
        if src == dst:
            self._updated(job_id)
        return self.get(job_id)

    def claim_submission(self, job_id: int, attempts: int, **fields: Any) -> JobRecord | None:
        """Start submission attempt ``attempts + 1`` (setting ``fields`` too), only if the
        job is still Pending after ``attempts`` attempts: a hold or a cancel made since
        the caller read the job wins, and then nothing changes and ``None`` is returned."""
        with self._tx() as db:
            row = db.execute("SELECT state, attempts FROM jobs WHERE id=?",
                             (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            if row["state"] != JobState.PENDING.value or row["attempts"] != attempts:
                return None
            self._update(db, job_id, attempts=attempts + 1, updated_at=time.time(), **fields)
        self._updated(job_id)
        return self.get(job_id)

    @staticmethod
    def document_fields(job: TrainJob) -> dict[str, str]:
        """The fields that store ``job`` as the job's document (with its summary), for a
        :meth:`transition` that changes both in one transaction."""
        return {"document": json.dumps(job.to_dict()), "summary": json.dumps(job_summary(job))}

    def update(self, job_id: int, **fields: Any) -> JobRecord:
        """Set bookkeeping fields without a state change."""
        with self._tx() as db:
            self._update(db, job_id, updated_at=time.time(), **fields)
        self._updated(job_id)
        return self.get(job_id)

    _COLUMNS = frozenset({
        "state", "reason", "message", "backend_id", "exit_code", "nodes", "stdout_path",
        "stderr_path", "queue", "attempts", "submitting_since", "next_attempt_at",
        "cancel_requested", "updated_at", "started_at", "finished_at", "document",
        "placement", "summary", "held",
    })

    def _update(self, db: sqlite3.Connection, job_id: int, **fields: Any) -> None:
        unknown = set(fields) - self._COLUMNS
        if unknown:
            raise ValueError(f"unknown job fields {sorted(unknown)}")
        if "nodes" in fields:
            fields["nodes"] = json.dumps(list(fields["nodes"]))
        if "placement" in fields and fields["placement"] is not None:
            fields["placement"] = json.dumps(fields["placement"], sort_keys=True)
        if "cancel_requested" in fields:
            fields["cancel_requested"] = int(bool(fields["cancel_requested"]))
        if "summary" in fields:  # the column jobs_suspend_work is on follows the summary
            fields["suspend_wanted"] = suspend_wanted(json.loads(fields["summary"] or "{}"))
        cols = ", ".join(f"{k}=?" for k in fields)
        db.execute(f"UPDATE jobs SET {cols} WHERE id=?", (*fields.values(), job_id))

    def request_cancel(self, job_id: int) -> JobRecord:
        return self.update(job_id, cancel_requested=True)

    def save_document(self, job_id: int, job: TrainJob) -> None:
        """Replace the stored TrainJob document (e.g. ``spec.suspend`` changed)."""
        with self._tx() as db:
            self._update(db, job_id, document=json.dumps(job.to_dict()),
                         summary=json.dumps(job_summary(job)), updated_at=time.time())
        self._updated(job_id)

    # -- reading -----------------------------------------------------------------

    def get(self, job_id: int) -> JobRecord:
        row = self._db.execute(f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE id=?",
                               (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row_to_record(row, self._document)

    def _document(self, job_id: int) -> str:
        """The stored document (JSON text) of job ``job_id``."""
        row = self._db.execute("SELECT document FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        text: str = row["document"]
        return text

    def count_active(self, owner_uid: int, at_most: int | None = None) -> int:
        """How many unfinished jobs the user ``owner_uid`` has, counted no further than
        ``at_most`` (None: all). An index range: one entry read per job counted."""
        states = [s.value for s in JobState if s not in TERMINAL]
        row = self._db.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE owner_uid=? AND state IN "
            f"({','.join('?' * len(states))}) LIMIT ?)",
            (owner_uid, *states, -1 if at_most is None else at_most)).fetchone()
        return int(row[0])

    def find(self, ref: str, namespace: str | None = None,
             caller_uid: int | None = None) -> JobRecord:
        """A job by numeric id (global; ``A_I``: task I of array A), or by uid or
        ``metadata.name`` (in ``namespace`` if given) resolved for the caller by
        :func:`bridge.refs.resolve`: the caller's own jobs first;
        :class:`bridge.refs.AmbiguousJob` when several users' jobs match;
        :class:`JobNotFound` when none does."""
        if (task := parse_task_ref(ref)) is not None:  # A_I: task I of array A
            job_id = self.task_id(*task)
            if job_id is None:
                raise JobNotFound(ref)
            return self.get(job_id)
        if ref.isascii() and ref.isdigit():  # not str.isdigit alone: "²" is a digit
            if len(ref) > 18:  # beyond SQLite's 64-bit ids
                raise JobNotFound(ref)
            row = self._db.execute(f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE id=?",
                                   (int(ref),)).fetchone()
            if row is None:
                raise JobNotFound(ref)
            return row_to_record(row, self._document)
        sql = f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE (uid=? OR name=?)"
        args: tuple[Any, ...] = (ref, ref)
        if namespace:
            sql += " AND namespace=?"
            args += (namespace,)
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        found = resolve(ref, [row_to_record(r, self._document) for r in rows], caller_uid)
        if found is None:
            raise JobNotFound(ref)
        return found

    def by_idempotency_key(self, owner_uid: int, key: str) -> JobRecord | None:
        """The job ``owner_uid`` submitted with idempotency key ``key``, or None."""
        row = self._db.execute(f"SELECT {LIGHT_COLUMNS} FROM jobs"
                               " WHERE owner_uid=? AND idempotency_key=?",
                               (owner_uid, key)).fetchone()
        return row_to_record(row, self._document) if row is not None else None

    def get_by_uid(self, uid: str) -> JobRecord | None:
        """The job with this uid (a TrainJob's ``metadata.uid``), or None (a light row:
        its document is read when first asked for, as :meth:`get`'s)."""
        row = self._db.execute(f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE uid=?",
                               (uid,)).fetchone()
        return row_to_record(row, self._document) if row is not None else None

    def by_uids(self, uids: Sequence[str], states: Sequence[JobState] | None = None,
                ) -> list[JobRecord]:
        """The jobs with these uids (in these states, if given), oldest first."""
        found: list[JobRecord] = []
        for start in range(0, len(uids), 500):  # SQLite's bound-parameter limit
            chunk = list(uids[start:start + 500])
            sql = f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE uid IN ({','.join('?' * len(chunk))})"
            args: list[Any] = chunk
            if states is not None:
                sql += f" AND state IN ({','.join('?' * len(states))})"
                args = [*chunk, *(s.value for s in states)]
            found += [row_to_record(r, self._document)
                      for r in self._db.execute(sql + " ORDER BY id", args)]
        return sorted(found, key=lambda r: r.id)

    def by_ids(self, ids: Sequence[int]) -> list[JobRecord]:
        """The jobs with these ids (light rows), oldest first; unknown ids are skipped."""
        found: list[JobRecord] = []
        for start in range(0, len(ids), 500):  # SQLite's bound-parameter limit
            chunk = list(ids[start:start + 500])
            sql = f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE id IN ({','.join('?' * len(chunk))})"
            found += [row_to_record(r, self._document) for r in self._db.execute(sql, chunk)]
        return sorted(found, key=lambda r: r.id)

    def due_keys(self, due_by: float) -> list[tuple[int, int, bool]]:
        """``(id, owner uid, needs a look)`` of the Pending jobs due by ``due_by``,
        oldest first, without decoding rows: what a submission pass sorts before it
        reads the records it will act on. A job needs a look whatever its owner's
        turn when a submission of it was tried (it may be in its back end) or a cancel
        is asked for."""
        rows = self._db.execute(
            "SELECT id, owner_uid, attempts > 0 OR cancel_requested FROM jobs "
            "WHERE state=? AND next_attempt_at<=? ORDER BY id",
            (JobState.PENDING.value, due_by)).fetchall()
        return [(r[0], r[1], bool(r[2])) for r in rows]

    @property
    def write_count(self) -> int:
        """Rows this store has inserted, updated or deleted since it was opened (SQLite's
        ``total_changes``: every table, triggers included): equal counts mean nothing
        was written between them. The daemon is the database's only writer."""
        return self._db.total_changes

    def job_keys(self, states: Sequence[JobState], backend: str
                 ) -> list[tuple[int, str, float]]:
        """``(id, uid, updated_at)`` of the jobs of ``backend`` in ``states``, oldest
        first: what the engine compares a status snapshot with, without decoding rows."""
        sql = (f"SELECT id, uid, updated_at FROM jobs WHERE backend=? "
               f"AND state IN ({','.join('?' * len(states))}) ORDER BY id")
        cursor = self._db.cursor()
        cursor.row_factory = None  # plain tuples: no sqlite3.Row per job
        return cursor.execute(sql, [backend, *(s.value for s in states)]).fetchall()

    def suspend_candidates(self, backend: str) -> list[JobRecord]:
        """The Submitted and Running jobs of ``backend`` that may need a suspend, resume,
        hold or release sent (:data:`bridge.schema.SUSPEND_WORK`, from its partial
        index): those whose summary's ``suspend`` differs from what their reason shows
        (``Suspended``/``BackendSuspended``) or is not in the summary, and those
        ``tcontrol`` held or released in their back end's queue (``held``); oldest
        first. The others need nothing unless this process sent them a suspend or
        resume (the engine adds those by id)."""
        sql = f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE backend=? AND {SUSPEND_WORK} ORDER BY id"
        rows = self._db.execute(sql, [backend]).fetchall()
        return [row_to_record(r, self._document) for r in rows]

    def list_jobs(self, states: Sequence[JobState] | None = None, user: str | None = None,
                  backend: str | None = None, origin: str | None = None,
                  updated_after: float | None = None, after_id: int | None = None,
                  limit: int | None = None, due_by: float | None = None,
                  cancel_requested: bool | None = None) -> list[JobRecord]:
        """Jobs matching every filter given, oldest first (by id): with ``after_id``
        only those after that id, and at most ``limit`` of them (a page); ``due_by``:
        only those whose next attempt is due by then; ``cancel_requested``: only those
        with (or without) a cancel asked for. Light rows: each document is read on first
        use of its record's :attr:`JobRecord.job`."""
        sql = f"SELECT {LIGHT_COLUMNS} FROM jobs WHERE 1=1"
        args: list[Any] = []
        if due_by is not None:
            sql += " AND next_attempt_at<=?"
            args.append(due_by)
        if cancel_requested is not None:  # as literals: =1 is jobs_cancel_pending's
            sql += " AND cancel_requested=1" if cancel_requested else " AND cancel_requested=0"
        if origin is not None:
            sql += " AND origin=?"
            args.append(origin)
        if updated_after is not None:
            sql += " AND updated_at>?"
            args.append(updated_after)
        where, more = job_filters(states=states, user=user, backend=backend,
                                  after_id=after_id)
        sql += where + " ORDER BY id"
        args += more
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        rows = self._db.execute(sql, args).fetchall()
        return [row_to_record(r, self._document) for r in rows]

    def transitions(self, job_id: int) -> list[Transition]:
        rows = self._db.execute(
            "SELECT * FROM transitions WHERE job_id=? ORDER BY id", (job_id,)
        ).fetchall()
        return [Transition(JobState(r["src"]) if r["src"] else None, JobState(r["dst"]),
                           r["reason"], r["message"], r["at"]) for r in rows]

    def pending_events(self, limit: int = 100) -> list[Event]:
        rows = self._db.execute(
            "SELECT * FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
        return [Event(r["id"], r["job_id"], json.loads(r["event"])) for r in rows]

    def mark_published(self, event_ids: Sequence[int]) -> None:
        with self._tx() as db:
            db.executemany("UPDATE outbox SET published_at=? WHERE id=?",
                           [(time.time(), i) for i in event_ids])
