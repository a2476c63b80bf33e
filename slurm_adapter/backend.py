"""Slurm as a bridge back end (:class:`bridge.backend.Backend`).

Jobs carry ``comment = "hpc-bridge:<TrainJob uid>"``; :meth:`SlurmBackend.lookup`
and :meth:`SlurmBackend.watch` find the bridge's jobs by that prefix in Slurm's job
table, finished jobs included for ``MinJobAge`` seconds, read one reading at a time by
:class:`slurm_adapter.job_table.JobTable` (a whole listing, or the jobs whose
``squeue`` line changed).

Slurm state -> :class:`BackendState`:

* PENDING, CONFIGURING, REQUEUED (and the other requeue/hold flags) -> PENDING
* RUNNING, COMPLETING, RESIZING, SIGNALING, STAGE_OUT -> RUNNING. A COMPLETING job
  has ended and Slurm is cleaning up: it stays RUNNING with its ``end_time``, but
  without an exit code: checked on 22.05, a job cancelled while ignoring SIGTERM
  shows ``COMPLETING`` with ``exit_code`` 0 and ends CANCELLED with 9, so the exit
  code is only trusted once the state is final.
* SUSPENDED, STOPPED -> SUSPENDED; COMPLETED; CANCELLED; TIMEOUT
* FAILED, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED,
  LAUNCH_FAILED -> FAILED; anything else -> UNKNOWN

Exit codes: Slurm 22.05 reports the batch script's raw wait status (``exit 3`` ->
768, killed by SIGKILL -> 9, scancel -> 15). ``BackendJob.exit_code`` is the exit
status, or ``128 + signal`` when a signal ended the script (``signal`` set too).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import socket
import sys
import time
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from bridge.arrays import NativeTask
from bridge.backend import (
    BackendError,
    BackendJob,
    BackendRejected,
    BackendUnavailable,
    Inventory,
    NodeInfo,
    Owner,
    StatusBatch,
    SubmitRequest,
    Units,
)
from bridge.batchscript import is_utf8
from bridge.output import read_owned
from bridge.plugin_settings import parse_settings
from slurm_adapter import hostlist
from slurm_adapter.cli import SlurmCli
from slurm_adapter.dialects import (
    V0_0_38,
    UnsupportedOption,
    dialect_for,
    dialect_from_meta,
    negotiate,
    served_versions,
)
from slurm_adapter.job_table import JobTable
from slurm_adapter.native_array import array_prologue, native_spec
from slurm_adapter.options import SUPPORT
from slurm_adapter.records import (
    backend_state,
    cut_lists,
    gpu_count,
    job_from_slurm,
    node_from_slurm,
)
from slurm_adapter.rest import JwtSigner, ScontrolTokens, SlurmRestClient, TokenSource
from slurm_adapter.script import (
    JobSpec,
    job_environment,
    job_spec,
    render_script,
    rest_job,
    sbatch_args,
    sbatch_output_env,
)
from slurm_adapter.settings import SlurmSettings
from slurm_adapter.topology import parse_partitions, parse_topology

__all__ = ["SlurmBackend", "backend_state", "create", "gpu_count", "job_from_slurm",
           "node_from_slurm"]

log = structlog.get_logger(__name__)

#: At most this much output per :meth:`SlurmBackend.read_log` call.

class SlurmBackend:
    """Slurm through slurmrestd (preferred) or its commands.

    It honours the sbatch options the bridge passes as they are
    (:mod:`bridge.slurm_options`, :mod:`slurm_adapter.options`); a job carrying one is
    submitted with ``sbatch`` even when slurmrestd is configured.

    Settings (``create(name, settings)``; all optional):

    ``rest_socket``
        path of slurmrestd's UNIX socket, or
    ``rest_url``
        ``http://host:port`` of slurmrestd.
    ``rest_version``
        OpenAPI version (``v0.0.38``, ``v0.0.40`` … ``v0.0.45``), or ``auto`` (the
        default): the first time the server is needed (at :meth:`start`, or later if
        slurmrestd was down then) read its ``GET /openapi/v3`` and speak the newest
        version both sides know; refuse, naming both lists, when there is none.
    ``jwt_key``
        path of Slurm's ``jwt_key``: sign tokens locally. Without it tokens come
        from ``scontrol token`` (needs root or SlurmUser).
    ``token_lifespan``
        seconds a token lives (default 3600).
    ``use_cli``
        talk to Slurm through sbatch/squeue/scancel/sinfo instead of slurmrestd
        (default: only when neither ``rest_socket`` nor ``rest_url`` is set).
    ``default_partition``
        partition for jobs that name none (default: Slurm's default partition).
    ``request_timeout``
        seconds for one REST request or one command (default 10).
    ``rest_user``
        the user the daemon lists jobs and nodes as over REST (default: the
        daemon's own user; it must see every user's jobs, e.g. root or SlurmUser).
    ``mpi_launch``
        path of the ``mpi-launch`` program as the compute nodes see it (default: the
        one installed beside the daemon, which suits a shared install; else
        ``mpi-launch`` on the job's PATH).
    ``client_root``
        a directory the Slurm commands run in through ``chroot`` (a root file system
        holding that cluster's client programs, ``slurm.conf`` and munge socket), for a
        cluster whose release or munge key differs from the daemon host's.
    ``changes_from_squeue``
        with slurmrestd: each poll runs ``squeue`` and reads only the jobs whose line
        changed (default true; :mod:`slurm_adapter.changes`); false: a whole listing.

    The topology always comes from ``scontrol show topology`` (slurmrestd 0.0.38
    has no topology endpoint); without ``scontrol`` the inventory has no switches.
    """

    #: Every scheduling option is honoured (slurm_adapter/options.py), a batch script in
    #: any encoding too (Slurm stores it as bytes).
    option_support = SUPPORT
    accepts_script_bytes = True
    #: A dependency on jobs of this cluster goes to Slurm with their Slurm ids
    #: (``SubmitRequest.dependency``; bridge/engine_dependency.py).
    native_dependencies = True
    #: A job's ``spec.initializer.dataset`` starts cache servers on its nodes before its
    #: training (slurm_adapter/cache_script.py, bridge/dataset.py).
    runs_data_cache = True
    #: sbatch (or slurmrestd) reads ``--begin`` itself: the bridge does not hold the job.
    native_begin = True

    def __init__(self, name: str, *, cli: SlurmCli, rest: SlurmRestClient | None = None,
                 default_partition: str | None = None, rest_user: str | None = None,
                 mpi_launch: str | None = None, negotiate_version: bool = False,
                 changes_from_squeue: bool = True, native_arrays: bool = False,
                 container_command: Sequence[str] = ()):
        self.name = name
        #: What a job's image runs through (bridge/backend.py; slurm_adapter/settings.py).
        self.container_command = tuple(container_command)
        self.container_setting = f"backends.{name}.container_command"
        #: Job arrays go to Slurm as one native array (bridge/engine_native_array.py).
        self.native_arrays = native_arrays
        #: Whether the last reading had an array's list of pending tasks cut short.
        self._cut_seen = False
        #: Pick the REST dialect from the server's OpenAPI document at start.
        self.negotiate_version = negotiate_version
        self.mpi_launch = mpi_launch or default_mpi_launch()
        self.cli = cli
        self.rest = rest
        self.default_partition = default_partition
        self.rest_user = rest_user or _user_name(os.geteuid())
        #: Slurm's job table as the bridge reads it.
        self.table = JobTable(cli, rest, self._rest_client, self.rest_user,
                              changes_from_squeue=changes_from_squeue,
                              native_arrays=native_arrays)

    # --- life cycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Check that Slurm answers; with ``rest_version = "auto"`` choose the dialect
        first (:class:`BackendRejected` when the server offers none the bridge speaks:
        waiting would not help)."""
        if self.rest is not None:
            await self._rest_client()
            await self.rest.ping(self.rest_user)
        else:
            await self.cli.ping()

    async def _rest_client(self) -> SlurmRestClient:
        """The REST client, its dialect chosen from the server's OpenAPI document the
        first time it is needed (at start, or later if slurmrestd was down then)."""
        assert self.rest is not None
        if self.negotiate_version:
            served = served_versions(await self.rest.openapi(self.rest_user))
            try:
                self.rest.dialect = negotiate(served)
            except ValueError as exc:
                raise BackendRejected(f"slurm back end {self.name}: {exc}") from None
            self.negotiate_version = False
            log.info("slurm back end %s: slurmrestd at %s offers %s; speaking %s",
                     self.name, self.rest.where, ", ".join(served), self.rest.dialect.version)
        return self.rest

    async def close(self) -> None:
        if self.rest is not None:
            await self.rest.close()

    # --- jobs -----------------------------------------------------------------------

    def _submission(self, request: SubmitRequest, script: str | None = None
                    ) -> tuple[JobSpec, str, dict[str, str], dict[str, str]]:
        """What :meth:`submit` hands Slurm: the spec, the script (``script``, else the
        job's own rendered), the job's environment and the environment sbatch gets."""
        spec = job_spec(request, default_chdir=request.owner.home(),
                        default_partition=self.default_partition)
        if script is None:
            script = render_script(request, self.mpi_launch,
                                   sibling_command(self.mpi_launch, "data-cache"),
                                   container=self.container_command)
        env = job_environment(request)
        # What a login shell gives the owner, unless the plan says otherwise: Open MPI 5+
        # refuses to start without HOME ("Unable to get the user home directory").
        for key, value in (("HOME", request.owner.home()), ("USER", request.owner.user),
                           ("LOGNAME", request.owner.user)):
            env.setdefault(key, value)
        # sbatch's: the directory it ran in (tbatch's, else the job's own), and its host
        # (the daemon's: tbatch reaches it through a local socket). slurmrestd sets
        # neither; sbatch would set "/" (where the daemon runs it) but for this.
        env.update(sbatch_output_env(spec))
        env["SLURM_SUBMIT_DIR"] = request.options.submit_dir or spec.chdir
        env["SLURM_SUBMIT_HOST"] = socket.gethostname()
        # With --export-file, slurmd 22.05 expands %x in --output from the job's
        # SLURM_JOB_NAME variable, not from the job record: without it the file is
        # "(null)-<id>.out". sbatch sets it only when exporting its own environment.
        return spec, script, env, {**env, "SLURM_JOB_NAME": spec.name}

    async def estimate(self, request: SubmitRequest) -> str:
        """``sbatch --test-only`` of what :meth:`submit` would submit, as the owner:
        Slurm's estimate of when and where the job would start (``Job N to start at
        ...``, Slurm's would-be id dropped). Nothing is submitted. Needs sbatch."""
        if not self.cli.has("sbatch"):
            raise BackendRejected("--test-only needs sbatch on the daemon's host")
        spec, script, _, cli_env = self._submission(request)
        try:
            args = sbatch_args(spec)
        except hostlist.HostlistError as exc:
            raise BackendRejected(str(exc)) from None
        text = await self.cli.test_only(script, args, cli_env, request.owner,
                                        spec.script_args)
        return re.sub(r"^Job \d+ ", "Job ", text)

    async def submit(self, request: SubmitRequest, script: str | None = None) -> str:
        """Submit as ``request.owner``; the Slurm job id. See the module docstring.
        ``script`` replaces the job's own batch script (the job's shape, options and key
        stay): an allocation holder's (:mod:`pool_adapter`)."""
        spec, script, env, cli_env = self._submission(request, script)
        return await self._send(request, spec, script, env, cli_env)

    async def submit_array(self, request: SubmitRequest, key: str, array_id: int,
                           indexes: str, tasks: Sequence[NativeTask]) -> str:
        """Submit ``tasks`` as one native Slurm array (slurm_adapter/native_array.py) as
        ``request.owner``: ``request`` the job every task runs (its ``array`` None),
        ``key`` the array's :func:`bridge.arrays.array_key`, ``array_id`` the bridge's
        array id ``A``, ``indexes`` sbatch's ``--array`` text. The array's Slurm id ``S``;
        task ``I`` is then Slurm's ``S_I``. BackendRejected for output names that name
        each task's own id."""
        script = render_script(request, self.mpi_launch,
                               sibling_command(self.mpi_launch, "data-cache"),
                               prologue=array_prologue(array_id, tasks),
                               container=self.container_command)
        spec, script, env, cli_env = self._submission(request, script)
        try:
            spec = native_spec(spec, request, key, array_id, indexes)
        except ValueError as exc:
            raise BackendRejected(str(exc)) from None
        return await self._send(request, spec, script, env, cli_env)

    async def _send(self, request: SubmitRequest, spec: JobSpec, script: str,
                    env: dict[str, str], cli_env: dict[str, str]) -> str:
        """Hand ``spec`` and ``script`` to Slurm (slurmrestd, else sbatch); its id."""
        # A script that is not UTF-8 (a Latin-1 comment) cannot travel in JSON: sbatch.
        if self.rest is not None and is_utf8(script):
            rest = await self._rest_client()
            try:
                body = rest_job(spec, env, rest.dialect)
            except UnsupportedOption as exc:
                if self.cli.has("sbatch"):
                    log.info("job %s: %s; submitting it with sbatch instead", request.job_uid,
                             exc)
                    return await self.cli.submit(script, sbatch_args(spec), cli_env, request.owner,
                                               spec.script_args)
                raise BackendRejected(str(exc)) from None
            except hostlist.HostlistError as exc:
                raise BackendRejected(str(exc)) from None
            return await rest.submit(request.owner.user, script, body)
        return await self.cli.submit(script, sbatch_args(spec), cli_env, request.owner,
                                     spec.script_args)

    async def _bridge_jobs(self) -> list[BackendJob]:
        """All the jobs carrying a bridge key (:meth:`_reading`)."""
        return (await self._reading())[0]

    async def _reading(self) -> tuple[list[BackendJob], bool]:
        """All the jobs carrying a bridge key (:meth:`JobTable.bridge_jobs`), and whether
        the reading is complete: a native array's pending tasks cut short (slurmrestd
        without ``SLURM_BITSTR_LEN=0``) are neither there nor gone (logged)."""
        jobs, cut = cut_lists(await self.table.bridge_jobs())
        if cut and not self._cut_seen:
            log.error("slurm back end %s: Slurm cut a native array's list of pending "
                      "tasks short; start slurmrestd with SLURM_BITSTR_LEN=0 in its "
                      "environment (docs/slurm.md). Until then no task is taken as gone "
                      "and none tried before is submitted again", self.name)
        self._cut_seen = cut  # logged once until it clears
        return jobs, not cut

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        """The Slurm jobs carrying these uids, with their owners, from one reading of
        the job table (see :meth:`_bridge_jobs`); BackendUnavailable while the reading
        is not complete (a job not found might be a task after a cut)."""
        wanted = set(job_uids)
        jobs, complete = await self._reading()
        if not complete:
            raise BackendUnavailable(f"slurm back end {self.name}: a native array's list of "
                                     "pending tasks is cut short (SLURM_BITSTR_LEN)")
        return [job for job in jobs if job.job_uid in wanted]

    async def watch(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        """A complete snapshot of the bridge's jobs every ``interval`` seconds (one
        reading each). While Slurm cannot be reached nothing is yielded; never raises."""
        while True:
            try:
                jobs, complete = await self._reading()
            except BackendError as exc:
                log.warning("slurm back end %s: no status this round: %s", self.name, exc)
            except Exception:
                log.exception("slurm back end %s: unexpected error reading job status",
                              self.name)
            else:
                yield StatusBatch(jobs=tuple(jobs), complete=complete, at=time.time())
            await asyncio.sleep(interval)

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        """Cancel as ``owner`` (SIGKILL request: Slurm sends SIGTERM, then SIGKILL after
        KillWait). A finished or unknown job is not an error."""
        if self.rest is not None:
            await (await self._rest_client()).cancel(owner.user, backend_id)
        else:
            await self.cli.cancel(backend_id, owner)

    async def signal(self, backend_id: str, signame: str, owner: Owner) -> None:
        """Send ``signame`` to the job's batch shell only, as ``owner``
        (:meth:`SlurmCli.signal`; needs scancel on the daemon's host)."""
        if not self.cli.has("scancel"):
            raise BackendRejected("signalling a Slurm job needs scancel on the daemon's host")
        await self.cli.signal(backend_id, signame, owner)

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        """Suspend: the job leaves its nodes and waits held (:meth:`SlurmCli.hold`:
        requeued and held if it runs, held if it waits); resume: released. As
        ``owner``, through ``scontrol`` on either path (slurmrestd has no requeue).
        Slurm's own ``scontrol suspend`` (SIGSTOP, the nodes kept) is for operators and
        would let one user keep nodes nobody else can use."""
        if not self.cli.has("scontrol"):
            raise BackendRejected("suspending a Slurm job needs scontrol on the daemon's "
                                  "host")
        if suspend:
            await self.cli.hold(backend_id, owner)
        else:
            await self.cli.release(backend_id, owner)

    async def hold_in_queue(self, backend_id: str, hold: bool, owner: Owner) -> None:
        """``scontrol hold`` (never a requeue: a job that started is refused) or
        ``release``, as ``owner``; as root it is Slurm's administrator hold
        (``JobHeldAdmin``), which the owner cannot release."""
        if not self.cli.has("scontrol"):
            raise BackendRejected("holding a Slurm job needs scontrol on the daemon's host")
        if hold:
            await self.cli.hold(backend_id, owner, requeue=False)
        else:
            await self.cli.release(backend_id, owner)

    # --- inventory --------------------------------------------------------------------

    async def inventory(self) -> Inventory:
        """Nodes (slurmrestd ``/nodes`` or ``sinfo --json``), the default topology
        (``scontrol show topology``: switches or blocks) and the topologies of
        partitions that have their own (``scontrol show partition -o``: 25.05+
        ``Topology=``)."""
        if self.rest is not None:
            rest = await self._rest_client()
            data = await rest.nodes(self.rest_user)
            dialect = rest.dialect
        else:
            data = await self.cli.nodes()
            dialect = dialect_from_meta(data.get("meta"))
        nodes: dict[str, NodeInfo] = {}
        for raw in data.get("nodes") or []:
            if isinstance(raw, dict) and raw.get("name"):
                info = node_from_slurm(raw, dialect)
                nodes.setdefault(info.name, info)
        if not self.cli.has("scontrol"):
            return Inventory(nodes=tuple(nodes.values()))
        switches = await self._topology(None) or {}
        partitions = parse_partitions(await self.cli.partitions())
        own: dict[str, Units | None] = {}
        read: dict[str, Units | None] = {}
        for partition, topology in partitions.topology.items():
            if topology not in read:
                read[topology] = await self._topology(topology)
            own[partition] = read[topology]
        # Where a job without -p goes: this back end's own default, else Slurm's.
        default = self.default_partition or partitions.default
        return Inventory(nodes=tuple(nodes.values()), switches=switches,
                         partition_switches=own, default_partition=default)

    async def _topology(self, name: str | None) -> Units | None:
        """One topology of the cluster (None: the default; a cluster without one reads
        as {}), or None when it cannot be read: a named topology always has units,
        so an empty answer for one is a failure, and its partition's jobs are not
        placed by the bridge rather than placed in a wrong topology."""
        try:
            units = parse_topology(await self.cli.topology(name))
        except hostlist.HostlistError as exc:
            log.warning("slurm back end %s: unreadable topology %s: %s", self.name,
                        name or "(default)", exc)
            return None
        if name is not None and not units:
            log.warning("slurm back end %s: topology %s read as empty", self.name, name)
            return None
        return units

    # --- output -----------------------------------------------------------------------

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        """Up to 1 MiB of the job's ``stdout``/``stderr`` file from ``offset``.

        The daemon may be root and the path is the user's choice, so the file is
        opened without following a final symlink and read only if it is a regular
        file owned by the job's owner (the user slurmd created it as). A missing,
        foreign or unknown-owner file gives ``(b"", offset)``.
        """
        if stream not in ("stdout", "stderr"):
            raise ValueError(f"stream must be 'stdout' or 'stderr', got {stream!r}")
        path = job.stdout_path if stream == "stdout" else job.stderr_path
        if not path or "%N" in path or offset < 0:
            return b"", offset
        owner_uid = job.owner_uid
        if owner_uid is None:
            owner_uid = self.table.owner_uids.get(job.backend_id)
        if owner_uid is None:
            try:
                await self._bridge_jobs()
            except BackendError as exc:
                log.info("read_log: cannot learn the owner of job %s: %s", job.backend_id, exc)
            owner_uid = self.table.owner_uids.get(job.backend_id)
        if owner_uid is None:
            log.warning("read_log: owner of Slurm job %s unknown; not reading %s",
                        job.backend_id, path)
            return b"", offset
        data = await asyncio.to_thread(read_owned, path, owner_uid, offset)
        return data, offset + len(data)


def default_mpi_launch() -> str:
    """``mpi-launch`` beside the running interpreter if it is there, else the bare name."""
    beside = Path(sys.executable).parent / "mpi-launch"
    return str(beside) if beside.exists() else "mpi-launch"


def sibling_command(mpi_launch: str, name: str) -> str:
    """``name`` installed beside ``mpi_launch`` (the same package's other command), or
    the bare name when ``mpi_launch`` is found on PATH."""
    return str(Path(mpi_launch).with_name(name)) if "/" in mpi_launch else name


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "root" if uid == 0 else str(uid)


def create(name: str, settings: Mapping[str, Any]) -> SlurmBackend:
    """Entry point ``hpc_bridge.backends: slurm``: a :class:`SlurmBackend` from settings
    (:class:`slurm_adapter.settings.SlurmSettings`). Raises ValueError naming
    ``backends.NAME.FIELD`` for unknown, malformed or contradictory settings."""
    s = parse_settings(SlurmSettings, f"backends.{name}", settings)
    cli = SlurmCli(timeout=s.request_timeout, root=s.client_root or None)
    rest: SlurmRestClient | None = None
    version = s.rest_version or "auto"
    if not s.cli_only:
        # Until start() has read the server's OpenAPI document: the oldest dialect.
        dialect = V0_0_38 if version == "auto" else dialect_for(version)
        tokens: TokenSource = (JwtSigner(s.jwt_key, s.token_lifespan) if s.jwt_key
                               else ScontrolTokens(cli.run_plain, s.token_lifespan))
        rest = SlurmRestClient(dialect, tokens, socket_path=s.rest_socket or None,
                               url=s.rest_url or None, timeout=s.request_timeout)
    return SlurmBackend(name, cli=cli, rest=rest,
                        default_partition=s.default_partition or None,
                        rest_user=s.rest_user or None, mpi_launch=s.mpi_launch or None,
                        negotiate_version=not s.cli_only and version == "auto",
                        changes_from_squeue=s.changes_from_squeue,
                        native_arrays=s.native_arrays,
                        container_command=s.container_command)
