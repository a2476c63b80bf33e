"""Flux as a bridge back end (:class:`bridge.backend.Backend`) through flux-python.

flux-python is imported lazily (:mod:`flux_adapter.client`): without it the daemon
starts, and this back end answers every call with :class:`BackendUnavailable` naming
the fix, which the engine retries with backoff.

Threads: a Flux handle is not thread-safe, so request/response calls (submit, cancel,
job-list, resources) run on ONE worker thread that owns one handle; the event stream
runs on its own thread with its own handle. Nothing blocking runs on the event loop.

Status (:meth:`FluxBackend.watch`) is event-driven: ONE ``job-manager.events-journal``
stream carries every event of every job of the instance (RFC 21), the redacted
jobspec with each ``submit`` (hence the TrainJob uid in ``attributes.user``) and R
with each ``alloc`` (hence the nodes). The journal starts with the backlog of active
jobs (``full: false``: not the whole retained history), then streams events in real
time; each event batch becomes a ``StatusBatch(complete=False)``. Per-job
``event_watch`` would need one streaming RPC (and a KVS watch) per job; the journal
is one stream whatever the number of jobs. A full snapshot (``complete=True``) comes
from one ``job-list`` query every ``reconcile_interval`` seconds (only jobs active
since the previous snapshot, RFC 43 ``since``), so jobs that finished while the
daemon was down, or were purged, are seen too.

The journal needs the instance owner's role. A daemon that is a guest of a system
instance (``EPERM``) falls back to one ``job-list`` query per poll interval, the
Slurm model, and says so in the log.

Idempotency: jobs carry the TrainJob uid in ``attributes.user.hpc_bridge_uid`` and at
the end of their name (``<name>.hpc-bridge-<uid>``). :meth:`FluxBackend.lookup` is ONE
``job-list`` query of all retained jobs (ids, names, states: about a hundred bytes a
job), then a pipelined ``job-info.lookup`` of the jobspec of only the jobs whose name
carries a wanted uid, to confirm ``attributes.user`` — paid only when the engine must
resolve a submit whose outcome it does not know.

Identity: with ``submit_as = "owner"`` (the default) a job whose owner is the daemon's
own user is submitted through flux-python; any other owner's job is submitted by
``flux job submit`` run AS THE OWNER (the daemon must be root), which signs the jobspec
as that user for a multi-user system instance. ``submit_as = "daemon"`` runs every job
as the daemon's user (a single-user instance; refused when the daemon is root).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import AsyncGenerator, Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bridge.backend import (
    BackendError,
    BackendJob,
    BackendRejected,
    BackendUnavailable,
    Inventory,
    Owner,
    StatusBatch,
    SubmitRequest,
)
from bridge.output import read_owned
from flux_adapter.client import (
    CONNECTION_ERRNOS,
    FluxConnection,
    PythonFlux,
    classify,
    is_transient,
    owner_command_env,
    run_flux_as,
)
from flux_adapter.events import (
    JobHistory,
    JobStatus,
    replay,
    status_from_history,
    status_from_list,
    to_backend_job,
)
from flux_adapter.jobspec import (
    JobspecInfo,
    build_jobspec,
    parse_job_id,
    resolve_output,
    uid_from_name,
)
from flux_adapter.resources import RError, inventory_nodes, nodes_of
from mpi_launch.hostlist import HostlistError, expand

__all__ = ["FluxBackend", "create", "default_mpi_launch"]

#: Standard logging with the fields in ``extra``: the daemon renders every record as one
#: structlog line (JSON with these keys in production), see bridge.daemon.configure_logging.
log = logging.getLogger(__name__)

T = TypeVar("T")

#: At most this much output per :meth:`FluxBackend.read_log` call.
#: Seconds subtracted from the previous snapshot's time in a ``since`` query (clock
#: skew between the daemon's host and the broker's).
SINCE_MARGIN = 300.0
#: Seconds after which a job nobody shows any more leaves the caches.
FORGET_AFTER = 3600.0
#: Longest wait (seconds) between two attempts to reach a lost broker again.
RECONNECT_CAP = 10.0
#: flux-core before this cannot stage the batch script ({{tmpdir}}, RFC 37 files).
MIN_FLUX_CORE = (0, 48)
_SUBMIT_REJECTS = frozenset({errno.EINVAL, errno.EPERM, errno.EPROTO, errno.E2BIG,
                             errno.EOVERFLOW, errno.ENOENT, errno.EACCES})


class _JournalRefused(Exception):
    """The journal needs the instance owner's role."""


@dataclass
class _Tracked:
    """One of the bridge's Flux jobs as the journal showed it."""

    job_id: int
    uid: str
    history: JobHistory = field(default_factory=JobHistory)
    nodes: tuple[str, ...] = ()


def default_mpi_launch() -> str:
    """``mpi-launch`` beside the running interpreter if it is there, else the bare name."""
    beside = Path(sys.executable).parent / "mpi-launch"
    return str(beside) if beside.exists() else "mpi-launch"


class FluxBackend:
    """Flux through flux-python. Settings: see :func:`create`."""

    def __init__(self, name: str, *, uri: str | None = None, queue: str | None = None,
                 mpi_launch: str | None = None, request_timeout: float = 10.0,
                 submit_as: str = "owner", reconcile_interval: float = 60.0,
                 flux_command: str = "flux",
                 connect: Callable[[], FluxConnection] | None = None) -> None:
        if submit_as not in ("owner", "daemon"):
            raise ValueError(f"flux back end {name!r}: submit_as must be 'owner' or "
                             f"'daemon', not {submit_as!r}")
        self.name = name
        self.uri = uri
        self.queue = queue
        self.mpi_launch = mpi_launch or default_mpi_launch()
        self.request_timeout = request_timeout
        self.submit_as = submit_as
        self.reconcile_interval = reconcile_interval
        self.flux_command = flux_command
        self._connect = connect or (lambda: PythonFlux(uri, request_timeout))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"flux-{name}")
        self._conn: FluxConnection | None = None  # touched only on the executor's thread
        self._tracked: dict[int, _Tracked] = {}
        self._foreign: set[int] = set()
        self._info: dict[int, JobspecInfo] = {}
        self._owner_uids: dict[int, int] = {}
        #: job id -> when Flux or the daemon last showed it (to forget old cache entries)
        self._seen: dict[int, float] = {}
        self._since: float | None = None
        self._journal_sessions: set[tuple[threading.Event,
                                          asyncio.Queue[tuple[str, Any]]]] = set()
        self._warned: set[str] = set()
        self._closed = False

    # --- calls on the worker thread ---------------------------------------------------

    def _in_thread(self, fn: Callable[[FluxConnection], T]) -> T:
        if self._conn is None:
            self._conn = self._connect()
        try:
            return fn(self._conn)
        except OSError as exc:
            if exc.errno in CONNECTION_ERRNOS and exc.errno not in (errno.ENOSYS,
                                                                    errno.ETIMEDOUT):
                self._drop()
            raise

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken handle may fail to close
                log.debug("closing a broken Flux handle failed", exc_info=True)

    async def _call(self, fn: Callable[[FluxConnection], T]) -> T:
        if self._closed:
            raise BackendUnavailable(f"flux back end {self.name} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._in_thread, fn)

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("flux back end %s: %s", self.name, message,
                        extra={"backend": self.name, "error": message})

    # --- life cycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and read the broker's version and owner; :class:`BackendUnavailable`
        (flux-python missing, libflux-core missing, broker unreachable) otherwise."""
        try:
            version, owner = await self._call(lambda c: (c.version(), c.instance_owner()))
        except BackendError:
            raise
        except Exception as exc:  # any failure means "not usable now"
            raise classify(exc, f"flux back end {self.name}: connecting") from None
        parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
        if parts and parts < MIN_FLUX_CORE:
            self._warn_once(f"flux-core {version} is older than 0.48: batch scripts "
                            f"({{{{tmpdir}}}}, RFC 37 files) will not work")
        log.info("flux back end %s: flux-core %s, instance owner uid %d, daemon uid %d, "
                 "submitting as %s", self.name, version, owner, os.geteuid(), self.submit_as,
                 extra={"backend": self.name, "flux_core": version, "instance_owner": owner,
                        "submit_as": self.submit_as})

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for stop, queue in list(self._journal_sessions):
            stop.set()
            queue.put_nowait(("closed", None))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._drop)
        self._executor.shutdown(wait=False)

    # --- jobs -------------------------------------------------------------------------

    def _as_owner(self, owner: Owner) -> bool:
        """Must this job be submitted by a ``flux`` command run as its owner?"""
        return self.submit_as == "owner" and owner.uid != os.geteuid()

    async def submit(self, request: SubmitRequest) -> str:
        """Submit the jobspec of :func:`flux_adapter.jobspec.build_jobspec`; the decimal
        Flux job id. Refusals (unsupported options, a jobspec Flux rejects, a user the
        daemon cannot act for) are :class:`BackendRejected`."""
        spec = build_jobspec(request, default_cwd=request.owner.home(),
                             mpi_launch=self.mpi_launch, default_queue=self.queue,
                             flux_command=self.flux_command)
        if self._as_owner(request.owner):
            job_id = await self._submit_as_owner(spec, request.owner)
        else:
            try:
                job_id = await self._call(lambda c: c.submit(spec))
            except BackendError:
                raise
            except Exception as exc:  # classified below
                raise classify(exc, "flux job submit", permanent=_SUBMIT_REJECTS) from None
        self._info[job_id] = JobspecInfo.from_jobspec(spec)
        self._seen[job_id] = time.time()
        self._owner_uids[job_id] = (request.owner.uid if self.submit_as == "owner"
                                    else os.geteuid())
        return str(job_id)

    async def _submit_as_owner(self, spec: Mapping[str, Any], owner: Owner) -> int:
        env = owner_command_env(owner, self.uri, self.flux_command)
        done = await run_flux_as(owner, [self.flux_command, "job", "submit"], env=env,
                                 stdin=json.dumps(spec).encode(),
                                 time_limit=max(self.request_timeout, 30.0))
        if done.returncode != 0:
            message = done.message or f"flux job submit exited with {done.returncode}"
            if is_transient(message):
                raise BackendUnavailable(f"flux job submit as {owner.user}: {message}")
            raise BackendRejected(f"flux job submit as {owner.user}: {message}")
        try:
            return parse_job_id(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BackendUnavailable(f"flux job submit printed no job id: {done.stdout!r} "
                                     f"{done.message}") from None

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        """Raise a ``cancel`` exception on the job (Flux then signals its tasks). A
        finished or unknown job is not an error. A guest daemon that may not cancel
        another user's job retries as the owner (``flux cancel``)."""
        job_id = int(backend_id)
        try:
            await self._call(lambda c: c.cancel(job_id, "cancelled through hpc-bridge"))
            return
        except BackendError:
            raise
        except OSError as exc:
            message = (exc.strerror or str(exc)).lower()
            if exc.errno == errno.ENOENT or "inactive" in message or "unknown job" in message:
                return
            if not (exc.errno == errno.EPERM and os.geteuid() == 0 and owner.uid != 0):
                raise classify(exc, f"flux cancel {backend_id}") from None
        except Exception as exc:
            raise classify(exc, f"flux cancel {backend_id}") from None
        env = owner_command_env(owner, self.uri, self.flux_command)
        done = await run_flux_as(owner, [self.flux_command, "cancel", backend_id], env=env,
                                 time_limit=max(self.request_timeout, 30.0))
        if done.returncode != 0 and "inactive" not in done.message.lower():
            message = done.message or f"flux cancel exited with {done.returncode}"
            raise (BackendUnavailable if is_transient(message) else BackendRejected)(
                f"flux cancel {backend_id} as {owner.user}: {message}")

    async def _jobspec_infos(self, job_ids: Iterable[int]) -> None:
        """Fill the jobspec cache for these ids (best effort, one pipelined batch)."""
        wanted = [j for j in job_ids if j not in self._info]
        if not wanted:
            return
        try:
            specs = await self._call(lambda c: c.jobspecs(wanted))
        except Exception as exc:  # paths and confirmation are best effort
            log.info("flux back end %s: jobspecs not readable: %s", self.name, exc,
                     extra={"backend": self.name, "error": str(exc)})
            return
        for job_id, spec in specs.items():
            self._info[job_id] = JobspecInfo.from_jobspec(spec)

    async def _listing(self, since: float) -> dict[tuple[str, int | None], BackendJob]:
        """The jobs carrying a bridge key, by (uid, owner's userid), from one job-list
        query (merged with what the journal knows, which is never older). Jobs of
        other owners carrying one key are all kept, for the engine to tell the real one
        from a forgery (:mod:`bridge.ownership`)."""
        try:
            entries = await self._call(lambda c: c.list_jobs(since))
        except BackendError:
            raise
        except Exception as exc:
            raise classify(exc, "flux job-list") from None
        candidates: dict[int, tuple[str, Mapping[str, Any]]] = {}
        for entry in entries:
            uid = uid_from_name(entry.get("name"))
            job_id = entry.get("id")
            if uid is not None and isinstance(job_id, int):
                candidates[job_id] = (uid, entry)
        await self._jobspec_infos(candidates)
        now = time.time()
        found: dict[tuple[str, int | None], BackendJob] = {}
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
            tracked = self._tracked.get(job_id)
            listed = status_from_list(rec)
            if tracked is not None and status_from_history(tracked.history).progress >= (
                    listed.progress):
                job = self._job_from_tracked(tracked)
            else:
                nodes = _hostlist(rec.get("nodelist"))
                job = self._job(job_id, uid, listed, nodes, rec.get("queue"))
            key = (uid, job.owner_uid)
            found[key] = _prefer(found.get(key), job)
        return found

    def _job(self, job_id: int, uid: str, status: JobStatus, nodes: tuple[str, ...],
             queue: object = None) -> BackendJob:
        info = self._info.get(job_id) or JobspecInfo(None, None, None, None, None, None)
        q = queue if isinstance(queue, str) and queue else info.queue
        return to_backend_job(
            job_id, uid, status, nodes=nodes,
            stdout_path=resolve_output(info.stdout, job_id, info.cwd),
            stderr_path=resolve_output(info.stderr, job_id, info.cwd),
            owner_uid=self._owner_uids.get(job_id), queue=q)

    def _job_from_tracked(self, t: _Tracked) -> BackendJob:
        return self._job(t.job_id, t.uid, status_from_history(t.history), t.nodes)

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        """The Flux jobs carrying these uids, with their owners: one job-list query of
        every retained job, then the jobspecs of the matching ones (see the module
        docstring). Should two jobs of one owner carry one uid, the unfinished one (else
        the newest) is returned."""
        wanted = set(job_uids)
        if not wanted:
            return []
        jobs = await self._listing(0.0)
        return [job for (uid, _), job in jobs.items() if uid in wanted]

    def world_uid(self, owner: Owner) -> int:
        """The userid Flux shows on ``owner``'s jobs (the daemon's with
        ``submit_as = "daemon"``): :class:`bridge.ownership.RunsAs`."""
        return owner.uid if self.submit_as == "owner" else os.geteuid()

    # --- status stream ----------------------------------------------------------------

    async def watch(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        """Event batches from the journal (``complete=False``) and a full snapshot
        every ``reconcile_interval`` s (``complete=True``); without the owner's role, a
        snapshot every ``interval`` s. Never raises: while Flux cannot be reached
        nothing is yielded, and it reconnects with backoff."""
        delay = interval
        polling = False
        while not self._closed:
            try:
                source = self._poll(interval) if polling else self._journal(interval)
                async with aclosing(source) as stream:
                    async for batch in stream:
                        yield batch
                        delay = interval
            except _JournalRefused as exc:
                self._warn_once(f"the event journal needs the instance owner's role "
                                f"({exc}); polling job-list every {interval:g}s instead")
                polling = True
                continue
            except BackendError as exc:
                self._warn_once(f"no status for now: {exc}")
            except Exception:
                log.exception("flux back end %s: unexpected error in the status stream",
                              self.name, extra={"backend": self.name})
            if self._closed:
                return
            await asyncio.sleep(delay)
            delay = min(max(delay, 0.5) * 2, RECONNECT_CAP)

    async def _try_snapshot(self) -> StatusBatch | None:
        try:
            return await self._snapshot()
        except BackendError as exc:
            self._warn_once(f"job-list snapshot failed (events still flow): {exc}")
            return None

    async def _snapshot(self) -> StatusBatch:
        """One complete snapshot: job-list since the last one (all on the first), merged
        with the journal's table; prunes what neither holds any more."""
        started = time.time()
        since = 0.0 if self._since is None else max(self._since - SINCE_MARGIN, 0.0)
        listed = await self._listing(since)
        self._since = started
        jobs = {j.backend_id: j for j in listed.values()}
        for t in list(self._tracked.values()):
            if str(t.job_id) in jobs:
                continue
            h = t.history
            if h.state == "INACTIVE" and (h.clean_time or 0.0) < since:
                del self._tracked[t.job_id]  # reported long ago and out of the window
                continue
            jobs[str(t.job_id)] = self._job_from_tracked(t)
        for job_id in self._tracked:
            self._seen[job_id] = started
        # Forget what neither Flux nor the journal showed for an hour (a job submitted a
        # moment ago may not be listed yet: its output paths must survive until it is).
        stale = [j for j in self._info if self._seen.get(j, started) < started - FORGET_AFTER]
        for job_id in stale:
            self._info.pop(job_id, None)
            self._owner_uids.pop(job_id, None)
            self._seen.pop(job_id, None)
        return StatusBatch(jobs=tuple(jobs.values()), complete=True, at=started)

    async def _poll(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        while True:
            yield await self._snapshot()
            await asyncio.sleep(interval)

    def _journal_thread(self, loop: asyncio.AbstractEventLoop,
                        queue: asyncio.Queue[tuple[str, Any]], stop: threading.Event) -> None:
        def put(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: the daemon is exiting
                stop.set()

        conn: FluxConnection | None = None
        try:
            conn = self._connect()
            for resp in conn.journal(stop):
                put(("event", resp))
                if stop.is_set():
                    return
            if not stop.is_set():
                put(("end", None))
        except BaseException as exc:  # handed to the event loop
            put(("error", exc))
        finally:
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    log.debug("closing the journal handle failed", exc_info=True)

    async def _journal(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()
        thread = threading.Thread(target=self._journal_thread, args=(loop, queue, stop),
                                  name=f"flux-{self.name}-journal", daemon=True)
        thread.start()
        session = (stop, queue)
        self._journal_sessions.add(session)
        self._tracked.clear()
        self._foreign.clear()
        caught_up = False
        next_snapshot = 0.0
        try:
            while True:
                timeout = None if not caught_up else max(0.0, next_snapshot - loop.time())
                try:
                    item = await asyncio.wait_for(queue.get(), timeout)
                except TimeoutError:
                    snapshot = await self._try_snapshot()
                    if snapshot is not None:
                        yield snapshot
                    next_snapshot = loop.time() + (self.reconcile_interval if snapshot
                                                   else min(interval, self.reconcile_interval))
                    continue
                changed: set[int] = set()
                sentinel = False
                while True:
                    kind, payload = item
                    if kind == "closed":
                        return
                    if kind == "error":
                        if isinstance(payload, OSError) and payload.errno == errno.EPERM:
                            raise _JournalRefused(payload.strerror or str(payload))
                        raise classify(payload, "flux event journal")
                    if kind == "end":
                        raise BackendUnavailable("the Flux event journal ended (broker or "
                                                 "job-manager restarted?)")
                    result = self._apply(payload)
                    if result is None:
                        sentinel = True
                    elif result >= 0:
                        changed.add(result)
                    if queue.empty():
                        break
                    item = queue.get_nowait()
                if sentinel and not caught_up:
                    caught_up = True
                    snapshot = await self._try_snapshot()
                    next_snapshot = loop.time() + (self.reconcile_interval if snapshot
                                                   else min(interval, self.reconcile_interval))
                    if snapshot is not None:
                        yield snapshot  # it holds every tracked job, changed or not
                        continue
                jobs = tuple(self._job_from_tracked(self._tracked[j]) for j in sorted(changed)
                             if j in self._tracked)
                if caught_up and jobs:
                    yield StatusBatch(jobs=jobs, complete=False, at=time.time())
        finally:
            stop.set()
            self._journal_sessions.discard(session)

    def _apply(self, resp: Mapping[str, Any]) -> int | None:
        """Apply one journal response: None for the end-of-backlog sentinel, the job id
        of one of the bridge's jobs it changed, or -1 (not ours, malformed)."""
        job_id = resp.get("id")
        events = resp.get("events")
        if job_id in (-1, 2**64 - 1):
            return None
        if not isinstance(job_id, int) or not isinstance(events, list):
            return -1
        tracked = self._tracked.get(job_id)
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
            tracked = self._tracked[job_id] = _Tracked(job_id=job_id, uid=info.uid)
        tracked.history = replay(events, tracked.history)
        if tracked.history.userid is not None:
            self._owner_uids.setdefault(job_id, tracked.history.userid)
        if resp.get("R") is not None:
            try:
                tracked.nodes = tuple(nodes_of(resp["R"]))
            except RError as exc:
                log.warning("flux back end %s: job %d: %s", self.name, job_id, exc,
                            extra={"backend": self.name, "flux_job": job_id,
                                   "error": str(exc)})
        return job_id

    # --- inventory --------------------------------------------------------------------

    async def inventory(self) -> Inventory:
        """Hosts with cores, GPUs and what is free, from the scheduler's view (the data
        of ``flux resource list``); properties become features, queues partitions. Flux
        publishes no switch tree, so there are no switches."""
        try:
            status, config = await self._call(lambda c: (c.resource_status(), c.config()))
        except BackendError:
            raise
        except Exception as exc:
            raise classify(exc, "flux resource status") from None
        queues = config.get("queues") if isinstance(config.get("queues"), Mapping) else {}
        try:
            nodes = inventory_nodes(status.get("all"), status.get("allocated"),
                                    status.get("down"), queues=queues)
        except RError as exc:
            raise BackendUnavailable(f"flux resource status: {exc}") from None
        return Inventory(nodes=nodes)

    # --- output -----------------------------------------------------------------------

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        """Up to 1 MiB of the job's output file from ``offset``. The file is opened
        without following a final symlink and read only if it is a regular file owned by
        the user the job ran as (its owner; the daemon's user with ``submit_as =
        daemon``)."""
        if stream not in ("stdout", "stderr"):
            raise ValueError(f"stream must be 'stdout' or 'stderr', got {stream!r}")
        path = job.stdout_path if stream == "stdout" else job.stderr_path
        if not path or offset < 0 or "{{" in path:
            return b"", offset
        if self.submit_as == "daemon":
            owner_uid: int | None = os.geteuid()
        else:
            owner_uid = job.owner_uid
            if owner_uid is None and job.backend_id.isdigit():
                owner_uid = self._owner_uids.get(int(job.backend_id))
        if owner_uid is None:
            log.warning("read_log: owner of Flux job %s unknown; not reading %s",
                        job.backend_id, path,
                        extra={"backend": self.name, "flux_job": job.backend_id})
            return b"", offset
        data = await asyncio.to_thread(read_owned, path, owner_uid, offset)
        return data, offset + len(data)


def _prefer(a: BackendJob | None, b: BackendJob) -> BackendJob:
    """Of two Flux jobs with one uid: the unfinished one, else the newest (larger id:
    Flux ids grow with submission time)."""
    if a is None:
        return b
    if a.state.finished != b.state.finished:
        return b if a.state.finished else a
    return a if int(a.backend_id) > int(b.backend_id) else b


def _hostlist(value: object) -> tuple[str, ...]:
    if not isinstance(value, str) or not value:
        return ()
    try:
        return tuple(expand(value, source="nodelist"))
    except HostlistError:
        return ()


_SETTINGS = {"uri", "queue", "mpi_launch", "request_timeout", "submit_as",
             "reconcile_interval", "flux_command"}


def create(name: str, settings: dict[str, Any]) -> FluxBackend:
    """Entry point ``hpc_bridge.backends: flux``. Settings (all optional):

    ``uri``
        the broker to talk to (``local:///run/flux/local``, ``ssh://host/path``); default
        ``FLUX_URI``, else the local instance.
    ``queue``
        Flux queue for jobs that name no ``--partition``.
    ``mpi_launch``
        path of ``mpi-launch`` as the compute nodes see it (default: beside the
        daemon's interpreter, else ``mpi-launch`` on the job's PATH).
    ``request_timeout``
        seconds for one Flux request (default 10).
    ``submit_as``
        ``owner`` (default) or ``daemon`` (see the module docstring).
    ``reconcile_interval``
        seconds between full job-list snapshots while events flow (default 60).
    ``flux_command``
        the ``flux`` program for commands run as a job's owner and for nested instances
        (default ``flux``).

    Never imports flux. Raises ValueError for unknown or invalid settings.
    """
    unknown = sorted(set(settings) - _SETTINGS)
    if unknown:
        raise ValueError(f"flux back end {name!r}: unknown settings {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(_SETTINGS))}")
    try:
        timeout = float(settings.get("request_timeout", 10.0))
        reconcile = float(settings.get("reconcile_interval", 60.0))
    except (TypeError, ValueError):
        raise ValueError(f"flux back end {name!r}: request_timeout and reconcile_interval "
                         f"must be numbers") from None
    if timeout <= 0 or reconcile <= 0:
        raise ValueError(f"flux back end {name!r}: request_timeout and reconcile_interval "
                         f"must be positive")
    submit_as = str(settings.get("submit_as", "owner"))
    if submit_as == "daemon" and os.geteuid() == 0:
        raise ValueError(f"flux back end {name!r}: submit_as = 'daemon' would run every "
                         f"job as root; use 'owner' (jobs signed as their owners)")
    uri = settings.get("uri")
    return FluxBackend(
        name, uri=str(uri) if uri else None, queue=settings.get("queue") or None,
        mpi_launch=settings.get("mpi_launch") or None, request_timeout=timeout,
        submit_as=submit_as, reconcile_interval=reconcile,
        flux_command=_absolute(str(settings.get("flux_command") or "flux")))


def _absolute(command: str) -> str:
    """``command`` as an absolute path when it is found on the daemon's PATH (so its
    directory can go first on the jobs' PATH), else unchanged."""
    if os.path.isabs(command):
        return command
    found = shutil.which(command)
    return os.path.abspath(found) if found else command
