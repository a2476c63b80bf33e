"""Which Slurm jobs changed, from ``squeue``'s text: the status poll reads only those.

Why: slurmctld's ``update_time`` filter is all-or-nothing, and slurmrestd 22.05 builds
the whole job table as JSON each time anything in it changed: about 0.8 s of its CPU at
6,000 jobs, before the bridge reads a byte. On a cluster with pending jobs something
changes between most polls (jobs start, end, are submitted), so a job's end reached
the bridge a poll interval plus that second after it happened. ``squeue`` prints the same
table as a few short text fields in C (about 50 ms at 6,000 jobs); the bridge then
reads only the jobs whose line changed, one ``GET /job/{id}`` each.

A line is ``FORMAT``'s fields separated by ``|``: the job's own id (``%A``: unique for
each task of an array, as slurmrestd's ``job_id``), then fields that no user writes
(state, reason, nodes, partition, owner, batch host, array ids), and the comment last
(``%k``, the user's text: it may hold ``|`` or a newline). A job is changed when its
line is not what it was. Start and end times are left out: a pending job's expected
start moves at each backfill cycle, and the bridge reads a start or an end only with
the state change that comes with it. What the line does not show (the job's name, its
output paths, the working directory) is refreshed by a whole listing at least every
:data:`slurm_adapter.changes.FULL_LISTING_EVERY` seconds.

Contract: :func:`parse` never guesses. A line that does not start with a numeric id
and the fixed fields, or an id on two lines (a newline in a comment: by accident, or
to pass a forged line off as another job's), makes the whole text unreadable (None),
and the caller lists the whole table instead. So a user can make the poll cost what it
cost before, never make it miss a change of another user's job.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["FORMAT", "QueueText", "changed", "parse", "squeue_argv"]

#: ``squeue -o`` fields: the job id, the fields no user writes, the comment last.
FORMAT = "%A|%T|%r|%N|%P|%U|%B|%F|%K|%k"
#: Fields before the comment.
_FIXED = FORMAT.count("|")
#: Digits of a job id at most (Slurm's are 32-bit; a longer "id" is a forged line).
_ID_DIGITS = 10


def squeue_argv() -> list[str]:
    """``squeue``'s arguments: every job the controller holds, finished ones included,
    in every partition (hidden ones too), without a header, as ``FORMAT``."""
    return ["squeue", "--noheader", "--all", "--states=all", f"--format={FORMAT}"]


@dataclass(frozen=True)
class QueueText:
    """One ``squeue`` text: each job's line (by its hash; salted per process, so no
    one can craft a collision ahead of time) and the ids whose comment carries the
    bridge's prefix."""

    lines: dict[int, int]
    bridge: frozenset[int]


def parse(text: str, comment_prefix: str) -> QueueText | None:
    """``text`` as :class:`QueueText`, or None when it cannot be read unambiguously
    (see the module's contract). ``comment_prefix`` tells the bridge's jobs."""
    lines: dict[int, int] = {}
    bridge: list[int] = []
    for line in text.split("\n"):
        if not line:
            continue
        fields = line.split("|", _FIXED)
        if len(fields) != _FIXED + 1:
            return None
        head = fields[0]
        if not (head.isascii() and head.isdigit() and len(head) <= _ID_DIGITS):
            return None
        job_id = int(head)
        if job_id in lines:
            return None
        lines[job_id] = hash(line)
        if fields[_FIXED].startswith(comment_prefix):
            bridge.append(job_id)
    return QueueText(lines, frozenset(bridge))


def changed(before: QueueText, now: QueueText, known: Collection[int]
            ) -> tuple[set[int], set[int]]:
    """``(to read, gone)`` between two texts: the bridge's jobs (by their comment now)
    whose line is new or differs, and the ``known`` ones (held from the last reading)
    whose line differs (a comment changed away from the prefix: reading tells); gone,
    the ``known`` ones no longer listed (Slurm forgot them)."""
    old = before.lines
    new = now.lines
    to_read = {job_id for job_id in now.bridge if old.get(job_id) != new[job_id]}
    gone: set[int] = set()
    for job_id in known:
        line = new.get(job_id)
        if line is None:
            gone.add(job_id)
        elif old.get(job_id) != line:
            to_read.add(job_id)
    return to_read, gone
