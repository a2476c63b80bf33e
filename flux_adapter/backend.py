"""Flux as a bridge back end (:class:`bridge.backend.Backend`) through flux-python.

flux-python is imported lazily (:mod:`flux_adapter.client`): without it the daemon
starts, and this back end answers every call with :class:`BackendUnavailable` naming
the fix, which the engine retries with backoff.

Threads: a Flux handle is not thread-safe, so request/response calls (submit, cancel,
job-list, resources) run on ONE worker thread that owns one handle; the event stream
runs on its own thread with its own handle. Nothing blocking runs on the event loop.

Status (:meth:`FluxBackend.watch`, run by :class:`flux_adapter.stream.StatusStream`
over the job table of :class:`flux_adapter.jobtable.JobTable`) is event-driven: ONE
``job-manager.events-journal`` stream carries every event of every job of the instance
(RFC 21), the redacted jobspec with each ``submit`` (hence the TrainJob uid in
``attributes.user``) and R with each ``alloc`` (hence the nodes). The journal starts
with the backlog of active jobs (``full: false``: not the whole retained history),
then streams events in real time; each event batch becomes a
``StatusBatch(complete=False)``. Per-job ``event_watch`` would need one streaming RPC
(and a KVS watch) per job; the journal is one stream whatever the number of jobs. A
full snapshot (``complete=True``) comes from one ``job-list`` query every
``reconcile_interval`` seconds (only jobs active since the previous snapshot, RFC 43
``since``), so jobs that finished while the daemon was down, or were purged, are seen
too.

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
import os
import shutil
import sys
import time
from collections.abc import AsyncGenerator, Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import structlog

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
from bridge.plugin_settings import parse_settings
from flux_adapter.client import (
    CONNECTION_ERRNOS,
    FluxConnection,
    PythonFlux,
    classify,
    is_transient,
    owner_command_env,
    run_flux_as,
)
from flux_adapter.jobspec import JobspecInfo, build_jobspec, parse_job_id
from flux_adapter.jobtable import JobTable
from flux_adapter.options import SUPPORT
from flux_adapter.resources import RError, inventory_nodes
from flux_adapter.settings import FluxSettings
from flux_adapter.stream import StatusStream

__all__ = ["FluxBackend", "create", "default_mpi_launch"]

#: structlog, with the fields as keyword arguments: the daemon renders every event as one
#: structlog line (JSON with these keys in production), see bridge.daemon.configure_logging.
log = structlog.get_logger(__name__)

T = TypeVar("T")

#: flux-core before this cannot stage the batch script ({{tmpdir}}, RFC 37 files).
MIN_FLUX_CORE = (0, 48)
_SUBMIT_REJECTS = frozenset({errno.EINVAL, errno.EPERM, errno.EPROTO, errno.E2BIG,
                             errno.EOVERFLOW, errno.ENOENT, errno.EACCES})


def default_mpi_launch() -> str:
    """``mpi-launch`` beside the running interpreter if it is there, else the bare name."""
    beside = Path(sys.executable).parent / "mpi-launch"
    return str(beside) if beside.exists() else "mpi-launch"


class FluxBackend:
    """Flux through flux-python. Settings: see :func:`create`."""

    #: What Flux does with each scheduling option (flux_adapter/options.py).
    option_support = SUPPORT
    #: A job's ``spec.initializer.dataset`` runs its tasks through ``data-cache run``,
    #: which starts one cache server per node first (data_cache/run.py).
    runs_data_cache = True

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
        self._warned: set[str] = set()
        self._table = JobTable(name, self._warn_once)
        self._stream = StatusStream(name, self._connect, self._table, self._snapshot,
                                    reconcile_interval, self._warn_once)
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
                        backend=self.name, error=message)

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
                 backend=self.name, flux_core=version, instance_owner=owner,
                 submit_as=self.submit_as)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stream.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._drop)
        self._executor.shutdown(wait=False)

    # --- jobs -------------------------------------------------------------------------

    def _as_owner(self, owner: Owner) -> bool:
        """Must this job be submitted by a ``flux`` command run as its owner?"""
        return self.submit_as == "owner" and owner.uid != os.geteuid()

    def _jobspec(self, request: SubmitRequest, default_cwd: str | None = None) -> dict[str, Any]:
        return build_jobspec(request, default_cwd=default_cwd or request.owner.home(),
                             mpi_launch=self.mpi_launch, default_queue=self.queue,
                             flux_command=self.flux_command,
                             data_cache=str(Path(self.mpi_launch).with_name("data-cache"))
                             if "/" in self.mpi_launch else "data-cache")

    def validate(self, request: SubmitRequest) -> None:
        """At admission (:class:`bridge.backend.Validating`): the jobspec builds, so
        that a job Flux could not be given is refused (400) rather than failing at
        submission; :class:`BackendRejected` names what it cannot express. No look-up
        of the owner's home (a directory service may be slow): ``/`` stands in."""
        self._jobspec(request, default_cwd="/")

    async def submit(self, request: SubmitRequest) -> str:
        """Submit the jobspec of :func:`flux_adapter.jobspec.build_jobspec`; the decimal
        Flux job id. Refusals (unsupported options, a jobspec Flux rejects, a user the
        daemon cannot act for) are :class:`BackendRejected`."""
        spec = self._jobspec(request)
        if self._as_owner(request.owner):
            job_id = await self._submit_as_owner(spec, request.owner)
        else:
            try:
                job_id = await self._call(lambda c: c.submit(spec))
            except BackendError:
                raise
            except Exception as exc:  # classified below
                raise classify(exc, "flux job submit", permanent=_SUBMIT_REJECTS) from None
        self._table.submitted(job_id, JobspecInfo.from_jobspec(spec),
                              request.owner.uid if self.submit_as == "owner" else os.geteuid())
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
        wanted = self._table.missing_infos(job_ids)
        if not wanted:
            return
        try:
            specs = await self._call(lambda c: c.jobspecs(wanted))
        except Exception as exc:  # paths and confirmation are best effort
            log.info("flux back end %s: jobspecs not readable: %s", self.name, exc,
                     backend=self.name, error=str(exc))
            return
        self._table.add_infos(specs)

    async def _listing(self, since: float) -> dict[tuple[str, int | None], BackendJob]:
        """The jobs carrying a bridge key, by (uid, owner's userid), from one job-list
        query (merged with what the journal knows, which is never older:
        :meth:`JobTable.merge_listing`)."""
        try:
            entries = await self._call(lambda c: c.list_jobs(since))
        except BackendError:
            raise
        except Exception as exc:
            raise classify(exc, "flux job-list") from None
        candidates = self._table.candidates(entries)
        await self._jobspec_infos(candidates)
        return self._table.merge_listing(candidates)

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
        snapshot every ``interval`` s (:class:`flux_adapter.stream.StatusStream`). Never
        raises: while Flux cannot be reached nothing is yielded, and it reconnects with
        backoff."""
        async for batch in self._stream.watch(interval):
            yield batch

    async def _snapshot(self) -> StatusBatch:
        """One complete snapshot: job-list since the last one (all on the first), merged
        with the journal's table; prunes what neither holds any more."""
        started = time.time()
        since = self._table.window()
        listed = await self._listing(since)
        return self._table.snapshot(listed, since, started)

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
                owner_uid = self._table.owner_uid(int(job.backend_id))
        if owner_uid is None:
            log.warning("read_log: owner of Flux job %s unknown; not reading %s",
                        job.backend_id, path,
                        backend=self.name, flux_job=job.backend_id)
            return b"", offset
        data = await asyncio.to_thread(read_owned, path, owner_uid, offset)
        return data, offset + len(data)


def create(name: str, settings: Mapping[str, Any]) -> FluxBackend:
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

    Never imports flux. Raises ValueError naming ``backends.NAME.KEY`` for unknown or
    invalid settings (:class:`flux_adapter.settings.FluxSettings`).
    """
    s = parse_settings(FluxSettings, f"backends.{name}", settings)
    if s.submit_as == "daemon" and os.geteuid() == 0:
        raise ValueError(f"backends.{name}.submit_as: 'daemon' would run every job as "
                         f"root; use 'owner' (jobs signed as their owners)")
    return FluxBackend(
        name, uri=s.uri or None, queue=s.queue or None, mpi_launch=s.mpi_launch or None,
        request_timeout=s.request_timeout, submit_as=s.submit_as,
        reconcile_interval=s.reconcile_interval,
        flux_command=_absolute(s.flux_command or "flux"))


def _absolute(command: str) -> str:
    """``command`` as an absolute path when it is found on the daemon's PATH (so its
    directory can go first on the jobs' PATH), else unchanged."""
    if os.path.isabs(command):
        return command
    found = shutil.which(command)
    return os.path.abspath(found) if found else command
