"""The status poll by change: ``squeue``'s text says which jobs changed, slurmrestd is
asked for those alone (:mod:`slurm_adapter.queue_diff` says why).

Each poll runs ``squeue`` first, then reads: so every record read is at least as new as
the text it is compared against next time, and a change that lands between the two is
read again at the next poll rather than missed. A whole listing is taken instead when:

* there is no text to compare with: the first poll, ``squeue`` missing, a text
  :func:`~slurm_adapter.queue_diff.parse` cannot read unambiguously, or ``squeue``
  failed or timed out (then for ``RETRY_AFTER`` seconds: it is not run meanwhile);
* the text is distrusted: it left out a job slurmrestd still holds (this ``squeue``
  does not see every job), for ``RETRY_AFTER`` seconds;
* more than ``MAX_READS`` jobs changed at once (one listing costs less than that many
  reads);
* a read of a changed job failed;
* ``FULL_LISTING_EVERY`` seconds passed since the last one (what the text does not
  show, such as a job's name or output path changed with ``scontrol update``, is then
  seen within that time).

Contract: :meth:`ChangeReader.plan` decides and has no effects; :meth:`read` fetches;
:meth:`listed` and :meth:`updated` record what the converter's memory now matches.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import structlog

from bridge.backend import BackendError
from slurm_adapter.cli import SlurmCli
from slurm_adapter.queue_diff import QueueText, changed, parse, squeue_argv
from slurm_adapter.rest import SlurmRestClient
from slurm_adapter.script import COMMENT_PREFIX

__all__ = ["FULL_LISTING_EVERY", "MAX_READS", "READS_AT_ONCE", "RETRY_AFTER", "ChangeReader"]

log = structlog.get_logger(__name__)

#: Seconds between whole listings while reading by change.
FULL_LISTING_EVERY = 60.0
#: More changed jobs than this in one poll: a whole listing instead (22.05 reads one job
#: in about 10 ms and lists 6,000 in about 0.8 s).
MAX_READS = 64
#: Reads in flight at once.
READS_AT_ONCE = 8
#: Seconds before squeue is run again after it failed, or trusted again after it
#: missed a job.
RETRY_AFTER = 300.0
#: A text longer than this is parsed in a worker thread (100,000 jobs: about 7 MB).
_OFF_LOOP_CHARS = 256 * 1024


class ChangeReader:
    """What the last poll's ``squeue`` text was, and when the last whole listing was."""

    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli
        #: The text the converter's memory is at least as new as (None: none yet).
        self._text: QueueText | None = None
        self._listed_at = -math.inf
        #: Monotonic time before which squeue is not run again (it failed).
        self._retry_at = -math.inf
        #: Monotonic time before which squeue's text is not trusted (it missed a job
        #: slurmrestd still holds: not root, or another cluster's squeue).
        self._distrust_until = -math.inf
        #: What last went wrong, for logging each trouble once.
        self._trouble: str | None = None

    async def queue_text(self) -> QueueText | None:
        """``squeue``'s text now; None when there is none to compare with: squeue is
        missing, failed or timed out (then it is not run again for ``RETRY_AFTER``
        seconds: a hanging squeue would hold every poll for the command timeout), or
        its text is ambiguous (:func:`queue_diff.parse`). Each case is logged once
        until it changes."""
        if not self.cli.has("squeue"):
            self._note("squeue-missing", "no squeue on this host; reading whole job "
                       "listings at each poll")
            return None
        if time.monotonic() < self._retry_at:
            return None
        try:
            done = await self.cli.run(squeue_argv())
            failure = None if done.returncode == 0 else done.message or \
                f"exit status {done.returncode}"
        except BackendError as exc:
            failure = str(exc)
        if failure is not None:
            self._retry_at = time.monotonic() + RETRY_AFTER
            self._note("squeue-failed", f"squeue failed ({failure}); reading whole job "
                       f"listings, squeue tried again in {RETRY_AFTER:g} s", always=True)
            return None
        text = done.stdout.decode(errors="replace")
        parsed = await asyncio.to_thread(parse, text, COMMENT_PREFIX) \
            if len(text) > _OFF_LOOP_CHARS else parse(text, COMMENT_PREFIX)
        if parsed is None:
            self._note("ambiguous", "squeue's text has a line that is no job's own (a "
                       "newline in a job's comment); reading whole job listings while "
                       "it is there")
            return None
        self._note(None, "")
        return parsed

    def _note(self, state: str | None, message: str, always: bool = False) -> None:
        """Log ``message`` when the reader's trouble ``state`` changes (None: none)."""
        if state is not None and (always or state != self._trouble):
            log.warning(message)
        elif state is None and self._trouble is not None:
            log.info("squeue's text is read again: only changed jobs are read")
        self._trouble = state

    def plan(self, text: QueueText | None, known: Collection[int]
             ) -> tuple[set[int], set[int]] | None:
        """The Slurm ids to read: the changed ones, and the ``known`` bridge jobs the
        text no longer shows (read, not dropped: an id Slurm really forgot reads as
        None); None when a whole listing is due."""
        now = time.monotonic()
        if text is None or self._text is None or now < self._distrust_until \
                or now - self._listed_at >= FULL_LISTING_EVERY:
            return None
        to_read, gone = changed(self._text, text, known)
        if len(to_read) + len(gone) > MAX_READS:
            return None
        return to_read, gone

    async def read(self, rest: SlurmRestClient, user: str, ids: Iterable[int]
                   ) -> dict[int, Any]:
        """Each job's record now (None: Slurm no longer holds it), ``READS_AT_ONCE``
        at a time; the first failure is raised and the other reads are cancelled."""
        slots = asyncio.Semaphore(READS_AT_ONCE)

        async def one(job_id: int) -> tuple[int, Any]:
            async with slots:
                return job_id, await rest.job(user, job_id)

        tasks = [asyncio.ensure_future(one(i)) for i in sorted(ids)]
        try:
            return dict(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()

    def check_gone(self, gone: Collection[int], records: Mapping[int, Any]) -> bool:
        """Whether the ids the text no longer showed are really gone; False (and
        :meth:`_distrust`) when slurmrestd still holds one."""
        missed = [i for i in gone if records.get(i) is not None]
        if missed:
            self._distrust(missed[0])
        return not missed

    def _distrust(self, job_id: int) -> None:
        """This squeue does not list every job slurmrestd holds (not run as root or
        SlurmUser, ``PrivateData=jobs``, another cluster's ``squeue``): its text is not
        used for ``RETRY_AFTER`` seconds, with a warning."""
        self._distrust_until = time.monotonic() + RETRY_AFTER
        log.warning("squeue does not list Slurm jobs that slurmrestd holds; it must see "
                    "every job of the cluster (run the daemon as root; client_root for "
                    "another cluster); reading whole job listings for a while",
                    job=job_id, seconds=RETRY_AFTER)

    def listed(self, text: QueueText | None, known: Collection[int]) -> None:
        """A whole listing, asked for after ``text``, was converted; ``known`` are the
        bridge's jobs in it. One the text lacks although an id above it was listed
        (ids grow; a job submitted after squeue ran is newer than any in its text)
        means this squeue does not see every job (:meth:`_distrust`): so a text
        missing many jobs cannot keep every poll on whole listings unnoticed."""
        self._text = text
        self._listed_at = time.monotonic()
        if text is not None and text.lines:
            newest = max(text.lines)
            missing = next((i for i in known if i < newest and i not in text.lines), None)
            if missing is not None and time.monotonic() >= self._distrust_until:
                self._distrust(missing)

    def updated(self, text: QueueText) -> None:
        """The jobs :meth:`plan` named were read after ``text`` and applied."""
        self._text = text
