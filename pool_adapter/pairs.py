"""Which holder is which JobSet's: the pool's bookkeeping of its jobs (no I/O).

A *pair* is one JobSet of this back end (annotated with the pool's name and its
owner's uid, labelled with the job uid) and the Slurm job holding nodes for it. A
holder belongs to a pair only when all of these hold:

* its comment names exactly this JobSet (``k8s-on-slurm:<pool> <namespace>/<name>``,
  written by the bridge when it submitted it as the owner),
* it carries the pair's job uid as its key,
* its Slurm owner is the uid recorded on the JobSet.

Pairs are keyed by the JobSet (``namespace/name``), never by the job uid alone: a
JobSet someone else made with a victim's uid label is a pair of its own, no holder
of the victim's names it, and nothing it does reaches the victim's holder. A pair is
forgotten once its JobSet is gone and its holder has ended (or was not seen for
``FORGET_AFTER`` seconds).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.backend import BackendJob
from pool_adapter import pinning

#: Seconds a pair whose JobSet is gone waits for its holder to show (a cancel within
#: one Slurm poll of the submission) before it is forgotten.
FORGET_AFTER = 60.0
UID_LABEL = "hpc-bridge.io/job-uid"
_UID = re.compile(r"[0-9]{1,10}")


def owner_uid_of(obj: Mapping[str, Any]) -> int | None:
    """The owner uid annotated on a JobSet (None: absent or not a plain number)."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(pinning.ANN_OWNER_UID)
    return int(text) if isinstance(text, str) and _UID.fullmatch(text) else None


@dataclass
class Pair:
    jobset_id: str
    uid: str
    owner_uid: int
    #: The JobSet object's own ``metadata.uid``: a JobSet made again under the same
    #: name (a job resubmitted) is a new pair.
    object_uid: str = ""
    holder: BackendJob | None = None
    #: The holder id last paired (kept when Slurm forgets the holder: the job's id).
    holder_id: str | None = None
    #: The holder's nodes the JobSet was last pinned to, by this process.
    pinned_nodes: tuple[str, ...] | None = None
    #: When (monotonic) the JobSet was first seen gone; None while it exists.
    gone_since: float | None = None


class Pairs:
    """The pool ``pool``'s pairs (see the module docstring)."""

    def __init__(self, pool: str, note_prefix: str):
        self.pool = pool
        self.note_prefix = note_prefix
        self.by_jobset: dict[str, Pair] = {}

    def note_of(self, jobset_id: str) -> str:
        """What follows the key in the comment of ``jobset_id``'s holder."""
        return f"{self.note_prefix}{jobset_id}"

    def take_jobset(self, jobset_id: str, obj: Mapping[str, Any] | None, now: float
                    ) -> Pair | None:
        """The JobSet ``jobset_id`` as the watch shows it now (None: gone). A JobSet
        of another back end, or without a uid label or a plain owner uid, is no pair.
        A pair's uid and owner are those first seen (a later edit of the labels does
        not re-point it)."""
        pair = self.by_jobset.get(jobset_id)
        if obj is None:
            if pair is not None and pair.gone_since is None:
                pair.gone_since = now
            return pair
        meta = obj.get("metadata") or {}
        if (meta.get("annotations") or {}).get(pinning.ANN_POOL) != self.pool:
            return pair
        uid = (meta.get("labels") or {}).get(UID_LABEL)
        owner = owner_uid_of(obj)
        object_uid = str(meta.get("uid") or "")
        if pair is not None and pair.object_uid != object_uid:
            pair = None  # the name's JobSet was made again: another job
        if pair is None:
            self.by_jobset.pop(jobset_id, None)
            if not isinstance(uid, str) or not uid or owner is None:
                return None
            pair = self.by_jobset[jobset_id] = Pair(jobset_id, uid, owner, object_uid)
        pair.gone_since = None
        return pair

    def mark_gone_except(self, listed: Collection[str], now: float) -> None:
        """A complete listing of the JobSets: every pair not in ``listed`` is gone (one
        deleted while the watch was away)."""
        for jobset_id, pair in self.by_jobset.items():
            if jobset_id not in listed and pair.gone_since is None:
                pair.gone_since = now

    def is_holder_of(self, pair: Pair, job: BackendJob) -> bool:
        return (job.note == self.note_of(pair.jobset_id) and job.job_uid == pair.uid
                and job.owner_uid == pair.owner_uid)

    def take_holders(self, jobs: Collection[BackendJob], complete: bool) -> list[Pair]:
        """Slurm's jobs (a complete listing, or the jobs of one followed holder): each
        pair's holder, of several the first (lowest id). Returns the pairs whose holder
        was looked at."""
        by_note: dict[str, list[BackendJob]] = {}
        for job in jobs:
            if job.note and job.note.startswith(self.note_prefix):
                by_note.setdefault(job.note[len(self.note_prefix):], []).append(job)
        touched: list[Pair] = []
        for jobset_id, pair in self.by_jobset.items():
            found = [j for j in by_note.get(jobset_id, ()) if self.is_holder_of(pair, j)]
            if not found and not complete:
                continue
            # The first one: the bridge submits the holder as soon as the JobSet exists,
            # before anyone else can know the uid to write in a comment of their own
            # (a Slurm job keeps its id when requeued); later ones are never chosen.
            found.sort(key=lambda h: int(h.backend_id) if h.backend_id.isascii()
                       and h.backend_id.isdigit() else 1 << 62)
            pair.holder = found[0] if found else None
            if pair.holder is not None:
                pair.holder_id = pair.holder.backend_id
            touched.append(pair)
        return touched

    def orphans(self, jobs: Collection[BackendJob]) -> list[tuple[BackendJob, str]]:
        """Unfinished holders of this pool whose named JobSet is no pair, or whose pair
        they are not the holder of: (the holder, the ``namespace/name`` it names)."""
        out: list[tuple[BackendJob, str]] = []
        for job in jobs:
            if job.state.finished or job.owner_uid is None or not job.note \
                    or not job.note.startswith(self.note_prefix):
                continue
            jobset_id = job.note[len(self.note_prefix):]
            pair = self.by_jobset.get(jobset_id)
            # No pair, a gone one, or one this job is not the holder of (another job
            # of the name, or a job its owner marked so by hand): cancelled as its own
            # owner, it holds nodes for nothing.
            if pair is None or pair.gone_since is not None or not self.is_holder_of(pair, job):
                out.append((job, jobset_id))
        return out

    def forget_done(self, now: float) -> list[Pair]:
        """Forget the pairs whose JobSet is gone and whose holder ended (or never showed
        within ``FORGET_AFTER``); returns them."""
        done = [p for p in self.by_jobset.values() if p.gone_since is not None and (
            (p.holder is not None and p.holder.state.finished)
            or (p.holder is None and now - p.gone_since >= FORGET_AFTER))]
        for p in done:
            del self.by_jobset[p.jobset_id]
        return done
