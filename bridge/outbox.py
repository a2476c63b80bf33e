"""Outbox events and the read-only queries of them (and of job counts) that the event
stream and the metrics use; :class:`bridge.store.Store` has them as a mixin.

Contract: every query is one indexed statement, cheap enough to run on the event loop
(the outbox feed asks :meth:`OutboxQueries.last_event_id` after commits, at most every
10 ms);
:meth:`OutboxQueries.prune_events` removes old events in bounded batches (the daemon's
retention, bridge/eventtasks.py).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

#: The most events :meth:`OutboxQueries.prune_events` removes at once.
PRUNE_BATCH = 5000


@dataclass(frozen=True)
class Event:
    """An outbox row: a state change (``payload`` as the store wrote it)."""

    id: int
    job_id: int
    payload: dict[str, Any] = field(default_factory=dict)


class OutboxQueries:
    """Queries of the outbox and of job counts (mixed into the store)."""

    _db: sqlite3.Connection
    #: (the connection's total_changes, the newest id) when last_event_id last looked.
    _newest_event: tuple[int, int] | None = None

    def events_after(self, seq: int, limit: int = 100, *, upto: int | None = None,
                     owner_uid: int | None = None) -> list[Event]:
        """Outbox rows with ``seq < id <= upto`` (published or not), oldest first, at
        most ``limit``; only the jobs of ``owner_uid`` when given (``/v1/events``)."""
        sql = "SELECT o.* FROM outbox o"
        args: list[Any] = []
        if owner_uid is not None:
            sql += " JOIN jobs j ON j.id = o.job_id AND j.owner_uid=?"
            args.append(owner_uid)
        sql += " WHERE o.id > ?"
        args.append(seq)
        if upto is not None:
            sql += " AND o.id <= ?"
            args.append(upto)
        rows = self._db.execute(sql + " ORDER BY o.id LIMIT ?", [*args, limit]).fetchall()
        return [Event(r["id"], r["job_id"], json.loads(r["event"])) for r in rows]

    def event_boundary(self, before: float) -> int:
        """The id of the first event written since ``before`` (the newest id + 1 when
        there is none): found from the oldest end, so the scan stops there (ids grow
        with time)."""
        row = self._db.execute("SELECT id FROM outbox WHERE created_at >= ? ORDER BY id "
                               "LIMIT 1", (before,)).fetchone()
        return int(row[0]) if row is not None else self.last_event_id() + 1

    def prune_events(self, boundary: int, *, published_only: bool,
                     limit: int = PRUNE_BATCH) -> int:
        """Remove at most ``limit`` of the oldest events below id ``boundary``
        (:meth:`event_boundary`; only published ones with ``published_only``); how many
        went."""
        sql = "SELECT id FROM outbox WHERE id < ?"
        if published_only:
            sql += " AND published_at IS NOT NULL"
        # One statement: atomic on its own (the store runs in autocommit mode).
        cur = self._db.execute(f"DELETE FROM outbox WHERE id IN ({sql} ORDER BY id LIMIT ?)",
                               (boundary, limit))
        return int(cur.rowcount)

    def last_event_id(self) -> int:
        """The newest outbox sequence number (0 when there is none). Asked on every
        reconcile pass and status round (4 % of the daemon's CPU while 200 TrainJobs
        ran: each statement opens a WAL read); answered from memory while this
        connection has written nothing since it last looked (the daemon is the
        database's only writer: :attr:`bridge.store.Store.write_count`)."""
        changes = self._db.total_changes
        kept = self._newest_event
        if kept is not None and kept[0] == changes:
            return kept[1]
        row = self._db.execute("SELECT max(id) FROM outbox").fetchone()
        newest = int(row[0] or 0)
        if not self._db.in_transaction:  # an id a rollback may take back is not kept
            self._newest_event = (changes, newest)
        return newest

    def outbox_backlog(self) -> tuple[int, float | None]:
        """How many events wait to be published, and when the oldest was written."""
        row = self._db.execute("SELECT count(*), min(created_at) FROM outbox "
                               "WHERE published_at IS NULL").fetchone()
        return int(row[0]), row[1]

    def count_jobs(self) -> dict[tuple[str, str], int]:
        """Jobs per (back end, state): one ``GROUP BY`` (for metrics at scrape time)."""
        rows = self._db.execute("SELECT backend, state, count(*) FROM jobs "
                                "GROUP BY backend, state").fetchall()
        return {(r[0], r[1]): int(r[2]) for r in rows}
