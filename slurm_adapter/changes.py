"""The status poll by change: ``squeue``'s text says which jobs changed, slurmrestd is
asked for those alone (:mod:`slurm_adapter.queue_diff` says why).

Each poll runs ``squeue`` first, then reads: so every record read is at least as new as
the text it is compared against next time, and a change that lands between the two is
read again at the next poll rather than missed. A whole listing is taken instead when:

* there is no text to compare with (the first poll, ``squeue`` missing or failing, or a
  text :func:`~slurm_adapter.queue_diff.parse` cannot read unambiguously);
* more than ``MAX_READS`` jobs changed at once (one listing costs less than that many
  reads);
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
from collections.abc import Collection, Iterable
from typing import Any

import structlog

from bridge.backend import BackendError
from slurm_adapter.cli import SlurmCli
from slurm_adapter.queue_diff import QueueText, changed, parse, squeue_argv
from slurm_adapter.rest import SlurmRestClient
from slurm_adapter.script import COMMENT_PREFIX

__all__ = ["FULL_LISTING_EVERY", "MAX_READS", "READS_AT_ONCE", "ChangeReader"]

log = structlog.get_logger(__name__)

#: Seconds between whole listings while reading by change.
FULL_LISTING_EVERY = 60.0
#: More changed jobs than this in one poll: a whole listing instead (22.05 reads one job
#: in about 10 ms and lists 6,000 in about 0.8 s).
MAX_READS = 64
#: Reads in flight at once.
READS_AT_ONCE = 8
#: A text longer than this is parsed in a worker thread (100,000 jobs: about 7 MB).
_OFF_LOOP_CHARS = 256 * 1024


class ChangeReader:
    """What the last poll's ``squeue`` text was, and when the last whole listing was."""

    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli
        #: The text the converter's memory is at least as new as (None: none yet).
        self._text: QueueText | None = None
        self._listed_at = -math.inf
        self._warned = False

    async def queue_text(self) -> QueueText | None:
        """``squeue``'s text now; None when squeue is missing or fails (logged once
        per failure run) or the text is ambiguous (:func:`queue_diff.parse`)."""
        if not self.cli.has("squeue"):
            return None
        try:
            done = await self.cli.run(squeue_argv())
        except BackendError as exc:
            self._warn(f"{exc}")
            return None
        if done.returncode != 0:
            self._warn(done.message)
            return None
        self._warned = False
        text = done.stdout.decode(errors="replace")
        if len(text) > _OFF_LOOP_CHARS:
            return await asyncio.to_thread(parse, text, COMMENT_PREFIX)
        return parse(text, COMMENT_PREFIX)

    def _warn(self, why: str) -> None:
        if not self._warned:
            log.warning("squeue failed; reading whole job listings until it works again",
                        reason=why)
            self._warned = True

    def plan(self, text: QueueText | None, known: Collection[int]
             ) -> tuple[set[int], set[int]] | None:
        """The Slurm ids to read and those gone since the last text, given the ``known``
        bridge jobs the converter holds; None when a whole listing is due."""
        if text is None or self._text is None \
                or time.monotonic() - self._listed_at >= FULL_LISTING_EVERY:
            return None
        to_read, gone = changed(self._text, text, known)
        if len(to_read) > MAX_READS:
            return None
        return to_read, gone

    async def read(self, rest: SlurmRestClient, user: str, ids: Iterable[int]
                   ) -> dict[int, Any]:
        """Each job's record now (None: Slurm no longer holds it), ``READS_AT_ONCE``
        at a time; the first failure is raised (the poll then reports nothing)."""
        slots = asyncio.Semaphore(READS_AT_ONCE)

        async def one(job_id: int) -> tuple[int, Any]:
            async with slots:
                return job_id, await rest.job(user, job_id)

        return dict(await asyncio.gather(*(one(i) for i in sorted(ids))))

    def listed(self, text: QueueText | None) -> None:
        """A whole listing, asked for after ``text``, was converted."""
        self._text = text
        self._listed_at = time.monotonic()

    def updated(self, text: QueueText) -> None:
        """The jobs :meth:`plan` named were read after ``text`` and applied."""
        self._text = text
