"""Slurm's job table as the bridge reads it: the bridge's jobs, converted, from one
reading at a time.

A reading is either a whole listing (slurmrestd ``GET /jobs``, or ``squeue --json``
without slurmrestd), converted by change (:mod:`slurm_adapter.listing`), or, with
slurmrestd and ``squeue`` at hand, the jobs whose ``squeue`` line changed since the last
reading, read one by one (:mod:`slurm_adapter.changes`, :mod:`slurm_adapter.queue_diff`).

Contract: :meth:`JobTable.bridge_jobs` answers one reading at a time, readings at
least ``MIN_GAP`` seconds apart, and each caller gets one that started after it called
(callers who waited while one was in flight share the next). So answers come in the
order they were asked, and none is older than one already handed out. Two readings in
flight at once could come back out of order: the k8s-on-slurm pool's follow-up of a
new holder was answered "pending" after the status watch had seen the holder run, its
JobSet pinned and finished, and the holder was cancelled instead of completed.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from bridge.backend import BackendError, BackendJob
from bridge.memtrim import trim_soon
from slurm_adapter.changes import ChangeReader
from slurm_adapter.cli import SlurmCli
from slurm_adapter.dialects import Dialect, dialect_from_meta
from slurm_adapter.listing import ListingConverter
from slurm_adapter.queue_diff import QueueText
from slurm_adapter.rest import SlurmRestClient

__all__ = ["MIN_GAP", "JobTable"]

log = structlog.get_logger(__name__)

#: Seconds between the starts of two readings. Callers who ask more often (the
#: k8s-on-slurm pool follows each new holder every 0.2 s, the engine looks jobs up
#: after a restart) share readings instead of each running ``squeue`` or a listing:
#: at most four job-table RPCs a second to slurmctld, whatever the callers.
MIN_GAP = 0.25
#: A whole listing of at least this many jobs asks for a heap trim once it is garbage
#: (bridge/memtrim.py): megabytes, where a smaller one is not worth a trim's walk of
#: the heap (changes_from_squeue = false reads one at every change).
TRIM_AFTER_JOBS = 1000


class JobTable:
    """The bridge's jobs in one Slurm cluster's job table (see the module docstring).

    ``rest_client`` gives the REST client once its dialect is chosen (None ``rest``:
    the commands alone); ``rest_user`` is who slurmrestd is asked as."""

    def __init__(self, cli: SlurmCli, rest: SlurmRestClient | None,
                 rest_client: Callable[[], Awaitable[SlurmRestClient]], rest_user: str, *,
                 changes_from_squeue: bool = False, native_arrays: bool = False) -> None:
        self.cli = cli
        self.rest = rest
        self._rest_client = rest_client
        self.rest_user = rest_user
        #: Slurm job id -> uid of its owner, from the last reading (for read_log).
        self.owner_uids: dict[str, int] = {}
        #: When the last whole REST listing was asked for (for ``update_time``).
        self._listed_at = 0
        #: What the last reading gave, converted. The listing itself is not kept: at
        #: 6,000 Slurm jobs its decoded JSON held some tens of MB for nothing (only
        #: the converter's 19 fields a job, to tell the unchanged ones).
        self._converted: list[BackendJob] | None = None
        self._converter = ListingConverter(arrays=native_arrays)
        #: One reading at a time, numbered as they start, at least ``min_gap`` seconds
        #: apart (monotonic time of the last start).
        self._lock = asyncio.Lock()
        self._started = 0
        self._done = 0
        self._last_start = -math.inf
        #: The number of the last reading that failed, and its error (shared with the
        #: callers who waited for it).
        self._failed: tuple[int, Exception] | None = None
        self.min_gap = MIN_GAP
        #: With slurmrestd: which jobs changed, from squeue's text (None: whole listings).
        self._changes = ChangeReader(cli) if rest is not None and changes_from_squeue \
            else None

    async def bridge_jobs(self) -> list[BackendJob]:
        """All the jobs carrying a bridge key, each with its owner (Slurm ``user_id``).
        Of several jobs with one key and one owner, the unfinished one (else the
        newest); jobs of other owners are all kept, for the engine to tell the real one
        from a forgery (:mod:`bridge.ownership`). When nothing changed, the last answer
        (the same list); unchanged jobs are the same objects as before."""
        wanted = self._started + 1  # the next one to start is fresh enough
        async with self._lock:
            if self._done >= wanted and self._converted is not None:
                return self._converted  # started after this call, by a caller before
            if self._failed is not None and self._failed[0] >= wanted:
                # The same failure, not one more try per waiter; a copy each, without
                # the reading's traceback (one object raised in every waiter would
                # gather all their frames).
                raise copy.copy(self._failed[1])
            wait = self._last_start + self.min_gap - time.monotonic()
            if wait > 0:  # callers arriving meanwhile share this reading
                await asyncio.sleep(wait)
            self._last_start = time.monotonic()
            self._started += 1
            number = self._started
            changes = self._changes
            # squeue first: whatever is read after it is at least as new as its text.
            try:
                text = await changes.queue_text() if changes is not None else None
                if not await self._read_changes(text):
                    await self._read_whole()
                    if changes is not None:
                        changes.listed(text, self._converter.known)
            except Exception as exc:
                self._failed = (number, copy.copy(exc))
                raise
            self._done = number
            assert self._converted is not None
            return self._converted

    async def _read_changes(self, text: QueueText | None) -> bool:
        """Apply the jobs that changed since the last text; False when a whole listing
        is due instead (:meth:`ChangeReader.plan`; a read that fails; a job the text no
        longer showed that slurmrestd still holds: :meth:`ChangeReader.check_gone`)."""
        changes, rest = self._changes, self.rest
        if changes is None or rest is None or self._converted is None:
            return False
        plan = changes.plan(text, self._converter.known)
        if plan is None:
            return False
        assert text is not None
        to_read, gone = plan
        if to_read or gone:
            try:
                records = await changes.read(rest, self.rest_user, to_read | gone)
            except BackendError as exc:
                log.info("slurm: reading changed jobs failed; a whole listing instead",
                         error=str(exc))
                return False
            if not changes.check_gone(gone, records):
                return False
            result = self._converter.update(records, rest.dialect)
            if result is None:
                return False
            self._converted, self.owner_uids = result
        changes.updated(text)
        return True

    async def _read_whole(self) -> None:
        """One whole listing, converted in a worker thread (thousands of jobs: a tenth
        of a second), and only when slurmrestd does not say nothing changed."""
        raw_jobs, dialect, asked_at = await self._listing()
        if raw_jobs is not None or self._converted is None:
            (jobs, owners), memory = await asyncio.to_thread(self._converter.prepare,
                                                             raw_jobs or [], dialect)
            # Remembered here, not in the thread: a reading cancelled meanwhile (its
            # thread runs on) must not overwrite what a later one remembered.
            self._converter.adopt(memory)
            # Only what Slurm still holds: bounded by Slurm's own job table.
            self.owner_uids = owners
            self._converted = jobs
            self._listed_at = asked_at
            if raw_jobs is not None and len(raw_jobs) >= TRIM_AFTER_JOBS:
                # The decoded listing (megabytes: ~3 KB a job) is garbage now.
                del raw_jobs
                trim_soon()

    async def _listing(self) -> tuple[list[Any] | None, Dialect, int]:
        """Slurm's job listing, the dialect it is in, and when it was asked for; the
        listing is None when slurmrestd says nothing changed since the last one that
        was converted (then that conversion stands)."""
        asked_at = int(time.time())
        if self.rest is not None:
            # Ask "anything changed since the last listing?" (a few seconds of margin
            # for clock skew with slurmctld); 304 means the last conversion holds.
            rest = await self._rest_client()
            since = self._listed_at - 5 if self._converted is not None else None
            answer = await rest.jobs(self.rest_user, changed_since=since)
            if answer is None and self._converted is not None:
                return None, rest.dialect, asked_at
            jobs = (answer or {}).get("jobs")
            return (jobs if isinstance(jobs, list) else []), rest.dialect, asked_at
        data = await self.cli.jobs()
        jobs = data.get("jobs")
        return (jobs if isinstance(jobs, list) else []), dialect_from_meta(data.get("meta")), \
            asked_at
