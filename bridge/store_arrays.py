"""The store's queries of job arrays (mixed into :class:`bridge.store.Store`).

An array's tasks are rows of ``jobs`` with the same ``array_job_id`` (the first task's
own id) and each its ``array_task_id`` (bridge/arrays.py); the index ``jobs_array``
(store schema version 5) finds them. Each query is one indexed statement.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

__all__ = ["ArrayQueries", "ArrayTaskRow", "parse_task_ref"]

#: ``A_I``: task I of array A (as squeue and scancel write it).
_TASK_REF = re.compile(r"([1-9][0-9]{0,17})_([0-9]{1,9})")


#: ``next_attempt_at`` of a task that waits for its array's throttle: not due until the
#: engine makes it so (bridge/engine_array.py).
NOT_DUE = 1e18


@dataclass(frozen=True)
class ArrayTaskRow:
    """What :meth:`bridge.store.Store.add` stores for one task of an array: its index
    (None: a plain job), uid, name and document (JSON text); ``waiting``: a reason the
    task starts with (it is then not due: :data:`NOT_DUE`), else None."""

    index: int | None
    uid: str
    name: str
    document: str
    waiting: str | None = None


def parse_task_ref(ref: str) -> tuple[int, int] | None:
    """``(array job id, index)`` of a reference ``A_I``; None for any other text."""
    m = _TASK_REF.fullmatch(ref) if ref.isascii() else None
    return (int(m.group(1)), int(m.group(2))) if m else None


class ArrayQueries:
    """Queries of job arrays (mixed into the store)."""

    _db: sqlite3.Connection

    def array_task_ids(self, array_job_id: int) -> list[int]:
        """The ids of array ``array_job_id``'s tasks, by index (empty: no such array)."""
        rows = self._db.execute("SELECT id FROM jobs WHERE array_job_id=? "
                                "ORDER BY array_task_id", (array_job_id,))
        return [r[0] for r in rows]

    def task_id(self, array_job_id: int, index: int) -> int | None:
        """The id of task ``index`` of array ``array_job_id``, or None."""
        row = self._db.execute("SELECT id FROM jobs WHERE array_job_id=? AND array_task_id=?",
                               (array_job_id, index)).fetchone()
        return None if row is None else int(row[0])

    def waiting_tasks(self, array_job_id: int, limit: int, reason: str) -> list[int]:
        """The ids of the first ``limit`` tasks (by index) of the array that are Pending
        with ``reason``, never tried."""
        rows = self._db.execute(
            "SELECT id FROM jobs WHERE array_job_id=? AND state='Pending' AND attempts=0 "
            "AND reason=? ORDER BY array_task_id LIMIT ?", (array_job_id, reason, limit))
        return [r[0] for r in rows]

    def arrays_waiting(self, reason: str) -> list[int]:
        """The job ids of the arrays with a task Pending with ``reason``."""
        rows = self._db.execute("SELECT DISTINCT array_job_id FROM jobs WHERE state='Pending'"
                                " AND reason=? AND array_job_id IS NOT NULL", (reason,))
        return [r[0] for r in rows]

    def native_unfinished(self, backend: str) -> int:
        """How many unfinished tasks of native arrays (their summary's ``arrayMode``,
        bridge/engine_native_array.py) back end ``backend`` has: one the engine could no
        longer read, were the back end to stop reading native arrays."""
        row = self._db.execute(
            "SELECT count(*) FROM jobs WHERE backend=? AND array_job_id IS NOT NULL AND "
            "state IN ('Pending', 'Suspended', 'Submitted', 'Running') AND "
            "summary LIKE '%\"arrayMode\": \"native\"%'", (backend,)).fetchone()
        return int(row[0])

    def array_in_backend(self, array_job_id: int) -> list[int]:
        """The ids of the array's tasks that are in their back end or may be: Submitted,
        Running, or Pending with a submission tried (what its throttle counts)."""
        rows = self._db.execute(
            "SELECT id FROM jobs WHERE array_job_id=? AND (state IN ('Submitted', 'Running')"
            " OR (state='Pending' AND attempts>0))", (array_job_id,))
        return [r[0] for r in rows]
