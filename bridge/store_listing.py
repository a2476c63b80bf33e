"""The job listing's read (``GET /v1/jobs``, what ``tqueue`` shows): the few columns a
listing shows, as plain rows, a page at a time. Mixed into :class:`bridge.store.Store`.

Why apart from :meth:`bridge.store.Store.list_jobs`: a listing of 10,000 jobs spent
most of its time building a :class:`~bridge.store_records.JobRecord` per row (about
16 µs each: ``sqlite3.Row`` lookups by name, three JSON columns, the owner and state
objects) for a view that needs a third of them; and SQLite answered
``state IN (...) ORDER BY id LIMIT n`` by reading every row of those states through the
``jobs_state`` index and sorting them, once per page. Here the page's ids come first,
from the covering index alone (a sort of integers), then only that page's rows, by id.

Contract: :meth:`ListingQueries.list_rows` returns :class:`ListRow` tuples (columns as
stored: JSON columns as text, times as epoch seconds) matching every filter given,
oldest first (by id), after ``after_id``, at most ``limit``; the same jobs, in the same
order, as ``Store.list_jobs`` with the same filters; :meth:`ListingQueries.table_rows`
the same page as the tuples squeue's default table is rendered from
(:mod:`bridge.queue_table`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

from bridge.queue_table import TABLE_COLUMNS
from bridge.states import JobState

__all__ = ["LIST_COLUMNS", "ListRow", "ListingQueries", "job_filters"]


def job_filters(*, states: Sequence[JobState] | None = None, user: str | None = None,
                backend: str | None = None, after_id: int | None = None
                ) -> tuple[str, list[Any]]:
    """The ``AND ...`` conditions (and their parameters) of a listing's filters, each
    only when given: the jobs in ``states``, of ``user``, of ``backend``, after id
    ``after_id`` (``Store.list_jobs`` and :meth:`ListingQueries.list_rows` share them)."""
    sql = ""
    args: list[Any] = []
    if after_id is not None:
        sql += " AND id>?"
        args.append(after_id)
    if states is not None:
        sql += f" AND state IN ({','.join('?' * len(states))})"
        args += [s.value for s in states]
    if user is not None:
        sql += " AND owner_user=?"
        args.append(user)
    if backend is not None:
        sql += " AND backend=?"
        args.append(backend)
    return sql, args


class ListRow(NamedTuple):
    """The columns of a job a listing shows (``bridge.views.list_view_of_row``)."""

    id: int
    uid: str
    namespace: str
    name: str
    owner_uid: int
    owner_user: str
    backend: str | None
    backend_id: str | None
    state: str
    reason: str | None
    message: str | None
    exit_code: int | None
    nodes: str  # JSON list
    stdout_path: str | None
    stderr_path: str | None
    queue: str | None
    attempts: int
    cancel_requested: int
    created_at: float | None
    started_at: float | None
    finished_at: float | None
    placement: str | None  # JSON object or NULL
    summary: str | None  # JSON object or NULL
    array_job_id: int | None
    array_task_id: int | None


LIST_COLUMNS = ", ".join(ListRow._fields)


class ListingQueries:
    """The listing's queries (mixed into the store)."""

    _db: sqlite3.Connection

    def list_rows(self, states: Sequence[JobState] | None = None, *,
                  user: str | None = None, backend: str | None = None,
                  after_id: int | None = None, limit: int | None = None) -> list[ListRow]:
        """One page of the listing (see the module's contract)."""
        return list(map(ListRow._make, self._page(LIST_COLUMNS, states, user=user,
                                                  backend=backend, after_id=after_id,
                                                  limit=limit)))

    def table_rows(self, states: Sequence[JobState] | None = None, *,
                   user: str | None = None, backend: str | None = None,
                   after_id: int | None = None, limit: int | None = None
                   ) -> list[tuple[Any, ...]]:
        """The same page as :meth:`list_rows`, as the plain tuples of
        :data:`bridge.queue_table.TABLE_COLUMNS` (the columns squeue's default table
        shows, the summary's fields read by SQLite)."""
        return self._page(TABLE_COLUMNS, states, user=user, backend=backend,
                          after_id=after_id, limit=limit)

    def _page(self, columns: str, states: Sequence[JobState] | None, *, user: str | None,
              backend: str | None, after_id: int | None, limit: int | None
              ) -> list[tuple[Any, ...]]:
        where, args = job_filters(states=states, user=user, backend=backend,
                                  after_id=after_id)
        sql = f"SELECT id FROM jobs WHERE 1=1{where} ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        ids = [r[0] for r in self._db.execute(sql, args)]
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            cursor = self._db.cursor()
            cursor.row_factory = None  # plain tuples: no name lookups per column
            cursor.execute(f"SELECT {columns} FROM jobs WHERE id IN "
                           f"({','.join('?' * len(chunk))}) ORDER BY id", chunk)
            rows += cursor.fetchall()
        return rows


#: Ids per ``IN (...)`` (well under SQLite's 32,766 bound parameters).
_CHUNK = 1000
