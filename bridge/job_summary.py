"""The light summary of a job kept beside its document (``jobs.summary``, store
schema version 4): what a listing shows from the TrainJob, so that listing and
reconciling never decode a document per row.

Contract: :func:`job_summary` is written whenever the document is (``Store.add``,
``Store.save_document``); :func:`add_summary_column` is the migration step that adds
the column and fills it for rows an older daemon wrote (self-contained, idempotent).
:func:`add_shape_column` is the step that adds ``jobs.shape`` (the job's
:class:`bridge.shape.JobShape`, written at admission; NULL for a row an older daemon
wrote, whose shape the engine resolves when it submits the job).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import Any

from bridge.arrays import ANN_NATIVE
from bridge.begin_time import ANN_BEGIN_AT
from bridge.model import TrainJob, ValidationError, load_document
from bridge.scheduling import scheduling_of

__all__ = ["add_shape_column", "add_summary_column", "job_summary", "suspend_wanted"]


def job_summary(job: TrainJob) -> dict[str, Any]:
    """What a listing shows of a job's document (``jobs.summary``): ``jobName``,
    ``partition``, ``timeLimitMinutes`` (from its scheduling options, None when they are
    invalid), ``runtime``, ``numNodes`` (1 when not given) and ``suspend``; with a
    ``--dependency``, ``dependency`` and ``killOnInvalidDep`` too; with ``--hold``,
    ``hold``; with ``--array``, ``array`` (its normal form), and for a native array
    ``arrayMode`` (``native``) and ``arrayKey`` (from :data:`bridge.arrays.ANN_NATIVE`);
    for a job the bridge holds until its ``--begin``, ``beginAt`` (from
    :data:`bridge.begin_time.ANN_BEGIN_AT`)."""
    try:
        options = scheduling_of(job)
        job_name, partition, limit = (options.job_name, options.partition,
                                      options.time_limit_minutes)
        dependency, kill, hold = options.dependency, options.kill_on_invalid_dep, options.hold
        array = options.array
    except ValidationError:
        job_name, partition, limit, dependency, kill, hold = None, None, None, None, None, False
        array = None
    trainer = job.spec.trainer
    summary: dict[str, Any] = {
        "jobName": job_name, "partition": partition, "timeLimitMinutes": limit,
        "runtime": job.spec.runtime_ref.name,
        "numNodes": trainer.num_nodes if trainer and trainer.num_nodes else 1,
        "suspend": bool(job.spec.suspend)}
    if dependency:  # only then: the engine's pass reads it without decoding documents
        summary.update(dependency=dependency, killOnInvalidDep=bool(kill))
    if hold:
        summary["hold"] = True
    begin = job.metadata.annotations.get(ANN_BEGIN_AT)
    if begin:  # admission wrote it; never let one row stop a listing
        with contextlib.suppress(ValueError):
            summary["beginAt"] = float(begin)
    if array:  # the engine's pass reads the throttle, a task's variables, without decoding
        summary["array"] = array
        native = job.metadata.annotations.get(ANN_NATIVE)
        if native:  # one native Slurm array, and its key (bridge/engine_native_array.py)
            summary.update(arrayMode="native", arrayKey=native)
    return summary


def suspend_wanted(summary: dict[str, Any]) -> int | None:
    """The summary's ``suspend`` as ``jobs.suspend_wanted`` stores it: 1, 0, or None
    when the summary has none (bridge/schema.py ``SUSPEND_WORK``)."""
    return int(bool(summary["suspend"])) if "suspend" in summary else None


def add_summary_column(conn: sqlite3.Connection) -> None:
    """Version 4, self-contained: add ``jobs.summary`` and fill it in for the jobs an
    older daemon stored (each document decoded once, here). Idempotent."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(jobs)")}
    if "summary" not in columns:
        conn.execute("ALTER TABLE jobs ADD COLUMN summary TEXT")
    rows = conn.execute("SELECT id, document FROM jobs WHERE summary IS NULL").fetchall()
    if not rows:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for row in rows:
            doc = load_document(json.loads(row["document"]))
            assert isinstance(doc, TrainJob)
            conn.execute("UPDATE jobs SET summary=? WHERE id=?",
                         (json.dumps(job_summary(doc)), row["id"]))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def add_shape_column(conn: sqlite3.Connection) -> None:
    """Version 4, self-contained: add ``jobs.shape`` (JSON, NULL for rows written
    before it: their shape is resolved when they are submitted). Idempotent."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(jobs)")}
    if "shape" not in columns:
        conn.execute("ALTER TABLE jobs ADD COLUMN shape TEXT")
