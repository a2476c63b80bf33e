"""What the Flux back end knows of the bridge's Flux jobs, and how it reconciles them.

A :class:`JobTable` is fed by three sources and answers in
:class:`bridge.backend.BackendJob` terms:

* the event journal (:meth:`JobTable.apply`, one response at a time): the jobs whose
  redacted jobspec carries a TrainJob uid in ``attributes.user`` are *tracked*, with
  their replayed event history and, from R, their nodes; any other job is remembered as
  *foreign* until its ``clean`` event, so its later events are ignored cheaply;
* ``job-list`` entries (:meth:`JobTable.candidates`, then :meth:`JobTable.merge_listing`):
  a listed job is the bridge's when its name carries a uid that its jobspec confirms;
  the journal's view wins when it is at least as far on (it is never older);
* the back end's own submissions (:meth:`JobTable.submitted`).

It also keeps the jobspec facts (output paths, queue, working directory) and the owner's
userid per job, for :meth:`flux_adapter.backend.FluxBackend.read_log`, and forgets
entries nobody has shown for :data:`FORGET_AFTER` seconds (:meth:`JobTable.snapshot`).

No I/O and no locking: the back end calls it from the event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from bridge.backend import BackendJob, StatusBatch
from flux_adapter.events import (
    JobHistory,
    JobStatus,
    replay,
    status_from_history,
    status_from_list,
    to_backend_job,
)
from flux_adapter.jobspec import JobspecInfo, resolve_output, uid_from_name
from flux_adapter.resources import RError, nodes_of
from mpi_launch.hostlist import HostlistError, expand

__all__ = ["FORGET_AFTER", "SINCE_MARGIN", "JobTable", "TrackedJob"]

log = structlog.get_logger(__name__)

#: Seconds subtracted from the previous snapshot's time in a ``since`` query (clock
#: skew between the daemon's host and the broker's).
SINCE_MARGIN = 300.0
#: Seconds after which a job nobody shows any more leaves the caches.
FORGET_AFTER = 3600.0

#: A bridge job in a listing: (TrainJob uid, the owner's userid).
Key = tuple[str, int | None]
#: job id -> (TrainJob uid, job-list entry): listed jobs whose name carries a uid.
Candidates = dict[int, tuple[str, Mapping[str, Any]]]


@dataclass
class TrackedJob:
    """One of the bridge's Flux jobs as the journal showed it."""

    job_id: int
    uid: str
    history: JobHistory = field(default_factory=JobHistory)
    nodes: tuple[str, ...] = ()


class JobTable:
    """The bridge's Flux jobs of one back end (``name``, for messages); ``warn_once``
    reports an inconsistency the operator should see (once per message)."""

    def __init__(self, name: str, warn_once: Callable[[str], None]) -> None:
        self.name = name
        self._warn_once = warn_once
        self.tracked: dict[int, TrackedJob] = {}
        self._foreign: set[int] = set()
        self._info: dict[int, JobspecInfo] = {}
        self._owner_uids: dict[int, int] = {}
        #: job id -> when Flux or the daemon last showed it (to forget old cache entries)
        self._seen: dict[int, float] = {}
        #: when the last complete snapshot was started (None: none yet)
        self._since: float | None = None

    # --- the back end's own submissions and jobspecs ----------------------------------

    def submitted(self, job_id: int, info: JobspecInfo, owner_uid: int) -> None:
        """Remember a job the back end has just submitted (before any listing shows it)."""
        self._info[job_id] = info
        self._seen[job_id] = time.time()
        self._owner_uids[job_id] = owner_uid

    def owner_uid(self, job_id: int) -> int | None:
        """The userid the job runs as, when Flux or the submission said it."""
        return self._owner_uids.get(job_id)

    def missing_infos(self, job_ids: Iterable[int]) -> list[int]:
        """Those of ``job_ids`` whose jobspec facts are not known yet."""
        return [j for j in job_ids if j not in self._info]

    def add_infos(self, specs: Mapping[int, Any]) -> None:
        """Jobspecs read from Flux, by job id."""
        for job_id, spec in specs.items():
            self._info[job_id] = JobspecInfo.from_jobspec(spec)

    # --- the event journal ------------------------------------------------------------

    def restart_journal(self) -> None:
        """A new journal session replays the backlog: forget what the last one tracked."""
        self.tracked.clear()
        self._foreign.clear()

    def apply(self, resp: Mapping[str, Any]) -> int | None:
        """Apply one journal response: None for the end-of-backlog sentinel, the job id
        of one of the bridge's jobs it changed, or -1 (not ours, malformed)."""
        job_id = resp.get("id")
        events = resp.get("events")
        if job_id in (-1, 2**64 - 1):
            return None
        if not isinstance(job_id, int) or not isinstance(events, list):
            return -1
        tracked = self.tracked.get(job_id)
        if tracked is None:
            if job_id in self._foreign:
                if any(isinstance(e, Mapping) and e.get("name") == "clean" for e in events):
                    self._foreign.discard(job_id)
                return -1
            info = JobspecInfo.from_jobspec(resp.get("jobspec"))
            if info.uid is None:
                if "jobspec" in resp:
                    self._foreign.add(job_id)
                return -1
            self._info[job_id] = info
            self._seen[job_id] = time.time()
            tracked = self.tracked[job_id] = TrackedJob(job_id=job_id, uid=info.uid)
        tracked.history = replay(events, tracked.history)
        if tracked.history.userid is not None:
            self._owner_uids.setdefault(job_id, tracked.history.userid)
        if resp.get("R") is not None:
            try:
                tracked.nodes = tuple(nodes_of(resp["R"]))
            except RError as exc:
                log.warning("flux back end %s: job %d: %s", self.name, job_id, exc,
                            backend=self.name, flux_job=job_id, error=str(exc))
        return job_id

    def changed(self, job_ids: Iterable[int]) -> tuple[BackendJob, ...]:
        """The tracked ones of ``job_ids``, in that order, as the engine sees them."""
        return tuple(self.job_of(self.tracked[j]) for j in job_ids if j in self.tracked)

    # --- job-list ---------------------------------------------------------------------

    @staticmethod
    def candidates(entries: Iterable[Mapping[str, Any]]) -> Candidates:
        """job id -> (uid, entry) for the listed jobs whose name carries a bridge uid."""
        out: Candidates = {}
        for entry in entries:
            uid = uid_from_name(entry.get("name"))
            job_id = entry.get("id")
            if uid is not None and isinstance(job_id, int):
                out[job_id] = (uid, entry)
        return out

    def merge_listing(self, candidates: Candidates) -> dict[Key, BackendJob]:
        """The bridge's jobs among ``candidates`` (read their jobspecs first: a job whose
        jobspec names another uid is not ours), by (uid, owner's userid), merged with
        what the journal knows. Jobs of other owners carrying one uid are all kept, for
        the engine to tell the real one from a forgery (:mod:`bridge.ownership`); of one
        owner's, :func:`prefer` keeps one."""
        now = time.time()
        found: dict[Key, BackendJob] = {}
        for job_id, (uid, rec) in candidates.items():
            info = self._info.get(job_id)
            if info is not None and info.uid != uid:
                self._warn_once(f"job {job_id}: its name says uid {uid}, its attributes.user "
                                f"says {info.uid}; not one of the bridge's jobs")
                continue
            self._seen[job_id] = now
            userid = rec.get("userid")
            if isinstance(userid, int):
                self._owner_uids[job_id] = userid
            tracked = self.tracked.get(job_id)
            listed = status_from_list(rec)
            if tracked is not None and status_from_history(tracked.history).progress >= (
                    listed.progress):
                job = self.job_of(tracked)
            else:
                nodes = hostlist_of(rec.get("nodelist"))
                job = self.job(job_id, uid, listed, nodes, rec.get("queue"))
            key = (uid, job.owner_uid)
            found[key] = prefer(found.get(key), job)
        return found

    # --- complete snapshots -----------------------------------------------------------

    def window(self) -> float:
        """The ``since`` of the next snapshot's job-list query: 0 (all retained jobs) for
        the first, else the previous snapshot's start less :data:`SINCE_MARGIN`."""
        return 0.0 if self._since is None else max(self._since - SINCE_MARGIN, 0.0)

    def snapshot(self, listed: Mapping[Key, BackendJob], since: float,
                 started: float) -> StatusBatch:
        """The complete snapshot of a job-list query started at ``started`` for the
        window ``since``: the listed jobs plus the tracked ones it did not show; prunes
        what neither holds any more."""
        self._since = started
        jobs = {j.backend_id: j for j in listed.values()}
        for t in list(self.tracked.values()):
            if str(t.job_id) in jobs:
                continue
            h = t.history
            if h.state == "INACTIVE" and (h.clean_time or 0.0) < since:
                del self.tracked[t.job_id]  # reported long ago and out of the window
                continue
            jobs[str(t.job_id)] = self.job_of(t)
        for job_id in self.tracked:
            self._seen[job_id] = started
        # Forget what neither Flux nor the journal showed for an hour (a job submitted a
        # moment ago may not be listed yet: its output paths must survive until it is).
        stale = [j for j in self._info if self._seen.get(j, started) < started - FORGET_AFTER]
        for job_id in stale:
            self._info.pop(job_id, None)
            self._owner_uids.pop(job_id, None)
            self._seen.pop(job_id, None)
        return StatusBatch(jobs=tuple(jobs.values()), complete=True, at=started)

    # --- as the engine sees them ------------------------------------------------------

    def job(self, job_id: int, uid: str, status: JobStatus, nodes: tuple[str, ...],
            queue: object = None) -> BackendJob:
        """A Flux job as a :class:`BackendJob`, with the output paths and queue of its
        jobspec (when known) and its owner's userid."""
        info = self._info.get(job_id) or JobspecInfo(None, None, None, None, None, None)
        q = queue if isinstance(queue, str) and queue else info.queue
        return to_backend_job(
            job_id, uid, status, nodes=nodes,
            stdout_path=resolve_output(info.stdout, job_id, info.cwd),
            stderr_path=resolve_output(info.stderr, job_id, info.cwd),
            owner_uid=self._owner_uids.get(job_id), queue=q)

    def job_of(self, t: TrackedJob) -> BackendJob:
        """A tracked job as a :class:`BackendJob`."""
        return self.job(t.job_id, t.uid, status_from_history(t.history), t.nodes)


def prefer(a: BackendJob | None, b: BackendJob) -> BackendJob:
    """Of two Flux jobs with one uid: the unfinished one, else the newest (larger id:
    Flux ids grow with submission time)."""
    if a is None:
        return b
    if a.state.finished != b.state.finished:
        return b if a.state.finished else a
    return a if int(a.backend_id) > int(b.backend_id) else b


def hostlist_of(value: object) -> tuple[str, ...]:
    """The hosts of a job-list ``nodelist`` (nothing when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return ()
    try:
        return tuple(expand(value, source="nodelist"))
    except HostlistError:
        return ()
