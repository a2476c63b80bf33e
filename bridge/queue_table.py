"""squeue's default table, rendered in the daemon: what ``tqueue`` shows without ``-o``,
``-O`` or ``--json`` (``GET /v1/jobs`` with ``Accept: text/plain``, bridge/api_table.py).

Why in the daemon: at 10,000 jobs ``tqueue`` took 6 times as long as ``squeue`` (about
35 µs a line: the daemon built and encoded each job's JSON view, the client decoded and
formatted it). Here each line comes from the few columns it shows (SQLite reads the
summary's fields), formatted once, and the client writes the text as it arrives.

Contract: :func:`render` returns, for rows of :data:`TABLE_COLUMNS` (oldest first, as
:meth:`bridge.store_listing.ListingQueries.table_rows` reads them, of jobs whose summary
is as :func:`bridge.job_summary.job_summary` writes it: strings, integers, nulls),
exactly the lines :func:`bridge.cli.tqueue.format_queue` prints without a header for the
same jobs' list views (:func:`bridge.views.list_view_of_row`) at the same time ``now``
(epoch seconds): ``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``, values cleaned of control
characters (:func:`bridge.queue_cells.clean`); with ``fold``, the pending tasks of an
array that have not reached their back end and wait for the same reason are one line, as
:func:`bridge.cli.queue_format.fold_pending` folds them. A unit test holds the two
renderings equal over generated jobs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from bridge.queue_cells import HEADER, NOT_STARTED, clean, compact_state, nodelist
from bridge.ranges import compress
from bridge.slurmtime import format_seconds

__all__ = ["HEADER", "TABLE_COLUMNS", "render"]

#: The columns (SQL over ``jobs``) a line is made of, in this order.
TABLE_COLUMNS = ", ".join((
    "id", "name", "owner_user", "backend_id", "state", "reason", "nodes", "queue",
    "started_at", "finished_at", "json_extract(summary, '$.jobName')",
    "json_extract(summary, '$.partition')", "json_extract(summary, '$.numNodes')",
    "json_extract(summary, '$.array')", "array_job_id", "array_task_id",
    # json_extract cuts a string at a NUL: such a summary is read whole, in Python.
    "CASE WHEN instr(summary, '\\u0000') THEN summary END",
))

def _elapsed(started: float | None, finished: float | None, now: float) -> str:
    """``%M``: from the start (to the second, as the job's view shows it) to the end,
    or to ``now`` while it has none."""
    if not started:
        return "0:00"
    end = int(finished) if finished else now
    return format_seconds(max(0, int(end - int(started))))


def _line(row: Sequence[Any], job_id: str, now: float) -> str:
    (_id, name, user, _bid, state, reason, nodes_json, queue, started, finished,
     job_name, partition, num_nodes, _array, _aj, _at, whole) = row
    if whole is not None:
        summary = json.loads(whole)
        job_name, partition, num_nodes = (summary.get("jobName"), summary.get("partition"),
                                          summary.get("numNodes"))
    nodes = [] if nodes_json == "[]" else json.loads(nodes_json)
    if state in NOT_STARTED:
        where = f"({reason or 'None'})"
    else:
        where = nodelist(nodes)
        if not where and reason:
            where = f"({reason})"
    count = len(nodes) if nodes else (num_nodes or 1)
    return (f"{job_id:>18.18} {clean(partition or queue or ''):>9.9} "
            f"{clean(job_name or name or ''):>8.8} {clean(user):>8.8} "
            f"{clean(compact_state(state, reason)):>2.2} "
            f"{_elapsed(started, finished, now):>10.10} {clean(count):>6.6} {clean(where)}\n")


def render(rows: Iterable[Sequence[Any]], now: float, *, fold: bool = True) -> str:
    """The default table's lines of ``rows`` (module contract)."""
    lines: list[str] = []
    groups: dict[tuple[int, str], tuple[int, Sequence[Any], list[int]]] = {}
    for row in rows:
        array_job, task = row[14], row[15]
        if array_job is None:
            lines.append(_line(row, str(row[0]), now))
        elif fold and row[4] == "Pending" and not row[3]:
            key = (array_job, str(row[5] or ""))
            group = groups.get(key)
            if group is None:
                groups[key] = (len(lines), row, [task])
                lines.append("")  # the folded line, written when the page is read
            else:
                group[2].append(task)
        else:
            lines.append(_line(row, f"{array_job}_{task}", now))
    for (array_job, _reason), (at, row, tasks) in groups.items():
        if len(tasks) > 1:
            array = json.loads(row[16]).get("array") if row[16] is not None else row[13]
            throttle = str(array or "").partition("%")[2]
            job_id = (f"{array_job}_[{compress(int(t or 0) for t in tasks)}"
                      f"{'%' + throttle if throttle else ''}]")
        else:
            job_id = f"{array_job}_{row[15]}"
        lines[at] = _line(row, job_id, now)
    return "".join(lines)
