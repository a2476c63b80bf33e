"""The store's schema and its migrations: the SQL that makes a fresh database, the
version it is (:data:`SCHEMA_VERSION`), and :func:`migrate`, which brings a database
written by any earlier release up to it. :func:`check_version` refuses a database
written by a newer release (:class:`SchemaTooNew`) before anything touches it.

Every step is idempotent and checks what is there (a column, an index) rather than
trusting the stored version number, so a migration cut off by a crash is taken up
again at the next start. tests/unit/fixtures/store/ keeps a database written by each
past release; tests/unit/test_store_upgrades.py opens each.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from bridge.errors import BridgeError
from bridge.job_summary import add_shape_column, add_summary_column

SCHEMA_VERSION = 6

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    uid               TEXT NOT NULL UNIQUE,
    namespace         TEXT NOT NULL,
    name              TEXT NOT NULL,
    owner_uid         INTEGER NOT NULL,
    owner_gid         INTEGER NOT NULL,
    owner_user        TEXT NOT NULL,
    backend           TEXT NOT NULL,
    origin            TEXT NOT NULL DEFAULT 'api',
    document          TEXT NOT NULL,
    state             TEXT NOT NULL,
    reason            TEXT NOT NULL DEFAULT '',
    message           TEXT NOT NULL DEFAULT '',
    backend_id        TEXT,
    exit_code         INTEGER,
    nodes             TEXT NOT NULL DEFAULT '[]',
    stdout_path       TEXT,
    stderr_path       TEXT,
    queue             TEXT,
    attempts          INTEGER NOT NULL DEFAULT 0,
    submitting_since  REAL,
    next_attempt_at   REAL NOT NULL DEFAULT 0,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    started_at        REAL,
    finished_at       REAL,
    placement         TEXT,
    idempotency_key   TEXT,
    request_digest    TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
-- References by name across namespaces (tshow NAME).
CREATE INDEX IF NOT EXISTS jobs_name ON jobs (name);
-- A name is unique among one owner's unfinished jobs only: as in Kubernetes, a TrainJob
-- deleted and created again under the same name is a new job (version 3); and one user
-- cannot take a name, in any namespace, from another (version 4; references resolve
-- among the caller's own jobs first, bridge/refs.py).
CREATE UNIQUE INDEX IF NOT EXISTS jobs_live_owner_name ON jobs (owner_uid, namespace, name)
    WHERE state NOT IN ('Succeeded', 'Failed', 'Cancelled');
CREATE INDEX IF NOT EXISTS jobs_origin_updated ON jobs (origin, updated_at);
-- Per-user counts (limits.max_active_jobs) and listings (version 4).
CREATE INDEX IF NOT EXISTS jobs_owner_state ON jobs (owner_uid, state);
CREATE INDEX IF NOT EXISTS jobs_user ON jobs (owner_user, id);
-- The unfinished jobs with a cancel to send (each reconcile pass asks; without it the pass
-- read every unfinished job through jobs_state: 11 ms a pass at 10,000). By state too:
-- the flag stays on a job once it has ended, and ended jobs pile up.
CREATE INDEX IF NOT EXISTS jobs_cancel_pending ON jobs (state, id) WHERE cancel_requested=1;
-- What a status snapshot is compared with (Store.job_keys), from the index alone: 6,000
-- jobs in Slurm cost 12 ms through jobs_state and the table at every changed listing,
-- 3.5 ms so; the index follows each row's updated_at (a write per change).
CREATE INDEX IF NOT EXISTS jobs_status_keys ON jobs (state, backend, id, uid, updated_at);
CREATE TABLE IF NOT EXISTS transitions (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id    INTEGER NOT NULL REFERENCES jobs (id),
    src       TEXT,
    dst       TEXT NOT NULL,
    reason    TEXT NOT NULL,
    message   TEXT NOT NULL,
    at        REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions (job_id);
CREATE TABLE IF NOT EXISTS outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        INTEGER NOT NULL REFERENCES jobs (id),
    event         TEXT NOT NULL,
    created_at    REAL NOT NULL,
    published_at  REAL
);
CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
-- The latest progress report of a job (bridge/store_progress.py); a table of its own,
-- so that a store without it (an older release's) only lacks reports.
CREATE TABLE IF NOT EXISTS trainer_status (
    job_id      INTEGER PRIMARY KEY REFERENCES jobs (id),
    status      TEXT NOT NULL,
    updated_at  REAL NOT NULL
);
"""


class SchemaTooNew(BridgeError, ValueError):
    """The database was written by a newer daemon than this one."""


def check_version(conn: sqlite3.Connection, path: str | Path) -> None:
    """Refuse a database whose schema is newer than :data:`SCHEMA_VERSION` (a
    downgrade): this daemon would misread it and would stamp it with its own version."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() if (
        has_meta) else None
    if row is not None and int(row["value"]) > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"store {path} has schema version {row['value']}, newer than this hpc-bridge "
            f"knows ({SCHEMA_VERSION}): it was written by a newer release; run that release "
            f"(or newer), or restore the backup taken before the upgrade")


def _migrate_idempotency(conn: sqlite3.Connection) -> None:
    """Version 4: ``jobs.idempotency_key`` and ``jobs.request_digest`` (a client's key
    for a submission and the SHA-256 of its body), unique per owner. Idempotent; a step
    of its own so that other schema steps merge beside it."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(jobs)")}
    for column in ("idempotency_key", "request_digest"):
        if column not in columns:
            conn.execute(f"ALTER TABLE jobs ADD COLUMN {column} TEXT")
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency ON jobs "
                 "(owner_uid, idempotency_key) WHERE idempotency_key IS NOT NULL")


def _migrate_arrays(conn: sqlite3.Connection) -> None:
    """Version 5: ``jobs.array_job_id`` and ``jobs.array_task_id`` (a task of a job
    array: the array's job id, the first task's own id, and the task's index; NULL for
    a plain job; bridge/arrays.py), and the index that finds an array's tasks.
    Idempotent."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(jobs)")}
    for column in ("array_job_id", "array_task_id"):
        if column not in columns:
            conn.execute(f"ALTER TABLE jobs ADD COLUMN {column} INTEGER")
    conn.execute("CREATE INDEX IF NOT EXISTS jobs_array ON jobs (array_job_id, array_task_id)"
                 " WHERE array_job_id IS NOT NULL")


def _migrate_held(conn: sqlite3.Connection) -> None:
    """``jobs.held`` (no version change, as ``jobs.queue``: an older daemon ignores it):
    a hold or release ``tcontrol`` asked for a job waiting in its back end's queue
    (bridge/engine_hold.py). Only the engine writes it, never from a client's input.
    Idempotent."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(jobs)")}
    if "held" not in columns:
        conn.execute("ALTER TABLE jobs ADD COLUMN held TEXT")


#: The jobs a reconcile pass may have a suspend, resume, hold or release to send
#: (``Store.suspend_candidates``): unfinished jobs in their back end whose wanted
#: ``spec.suspend`` differs from what their reason shows (or is not known: a summary
#: without it), and those ``tcontrol`` held or released in their back end's queue. The
#: partial index ``jobs_suspend_work`` holds exactly these; its query must say the same.
SUSPEND_WORK = ("state IN ('Submitted', 'Running') AND (held IS NOT NULL OR "
                "(backend_id IS NOT NULL AND suspend_wanted IS NOT "
                "(reason IN ('Suspended', 'BackendSuspended'))))")


def _migrate_suspend_wanted(conn: sqlite3.Connection) -> None:
    """``jobs.suspend_wanted`` (no version change, as ``jobs.held``): the summary's
    ``suspend`` as 1 or 0 (NULL without one), written with every summary
    (``Store.add``, ``Store._update``), and the index of :data:`SUSPEND_WORK`. Why a
    column: each reconcile pass scanned every job of a back end for that work, reading
    ``json_extract(summary)`` of each (3.7 ms a pass at 6,000 jobs in Slurm); an index on
    the ``json_extract`` itself fails every write under ``trusted_schema=OFF``.
    Recomputed here for unfinished jobs at each start (a daemon of this version from
    before the column writes summaries without it). Idempotent."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(jobs)")}
    if "suspend_wanted" not in columns:
        conn.execute("ALTER TABLE jobs ADD COLUMN suspend_wanted INTEGER")
    # A malformed summary (only a damaged store has one) reads as none: NULL, always
    # looked at; json_extract alone would stop the daemon from starting.
    wanted = "CASE WHEN json_valid(summary) THEN json_extract(summary, '$.suspend') END"
    conn.execute(f"UPDATE jobs SET suspend_wanted={wanted} WHERE state NOT IN "
                 f"('Succeeded', 'Failed', 'Cancelled') AND suspend_wanted IS NOT {wanted}")
    conn.execute(f"CREATE INDEX IF NOT EXISTS jobs_suspend_work ON jobs (backend, id) "
                 f"WHERE {SUSPEND_WORK}")


def migrate(conn: sqlite3.Connection) -> None:
    """Bring a database written by an older daemon up to :data:`SCHEMA_VERSION`
    (the first version-1 release had no ``jobs.queue``, added later without a version
    change; version 2 added ``jobs.placement``; version 3 made names unique among
    unfinished jobs only, which rebuilds the table without its ``UNIQUE (namespace,
    name)``; version 4: :func:`_migrate_idempotency`,
    :func:`bridge.job_summary.add_summary_column`,
    :func:`~bridge.job_summary.add_shape_column` and names unique per owner; version 5:
    :func:`_migrate_arrays`; version 6: the ``trainer_status`` table, made by
    :data:`SCHEMA_SQL`, and progress events in the outbox, which an older daemon would
    misread: the version refuses it).
    Idempotent. tests/unit/fixtures/store/ keeps a database written by each past
    version."""
    columns = {row["name"] for row in conn.execute("PRAGMA table_info(jobs)")}
    if "queue" not in columns:
        conn.execute("ALTER TABLE jobs ADD COLUMN queue TEXT")
    if "placement" not in columns:
        conn.execute("ALTER TABLE jobs ADD COLUMN placement TEXT")
    table_sql = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type='table' AND name='jobs'").fetchone()[0]
    unique = re.compile(r",\s*UNIQUE\s*\(\s*namespace\s*,\s*name\s*\)")
    if unique.search(table_sql):
        new_sql = re.sub(r"^CREATE TABLE\s+\"?jobs\"?", "CREATE TABLE jobs_v3",
                         unique.sub("", table_sql), count=1)
        conn.execute("PRAGMA foreign_keys=OFF")
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(new_sql)
            conn.execute("INSERT INTO jobs_v3 SELECT * FROM jobs")
            conn.execute("DROP TABLE jobs")
            conn.execute("ALTER TABLE jobs_v3 RENAME TO jobs")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        finally:
            conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(SCHEMA_SQL)
    _migrate_idempotency(conn)
    add_summary_column(conn)
    add_shape_column(conn)
    _migrate_arrays(conn)
    _migrate_held(conn)
    _migrate_suspend_wanted(conn)
    # Version 4: names unique per owner (jobs_live_owner_name, made by _SCHEMA).
    conn.execute("DROP INDEX IF EXISTS jobs_live_name")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                 (str(SCHEMA_VERSION),))
