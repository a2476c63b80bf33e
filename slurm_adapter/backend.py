"""Slurm as a bridge back end (:class:`bridge.backend.Backend`).

Jobs carry ``comment = "hpc-bridge:<TrainJob uid>"``; :meth:`SlurmBackend.lookup`
and :meth:`SlurmBackend.watch` find the bridge's jobs by that prefix in ONE
listing of all jobs (slurmrestd ``GET /jobs`` or ``squeue --json``, both of which
include finished jobs for ``MinJobAge`` seconds).

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
import functools
import os
import pwd
import re
import sys
import time
from collections.abc import AsyncGenerator, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from bridge.backend import (
    BackendError,
    BackendJob,
    BackendRejected,
    BackendState,
    Inventory,
    NodeInfo,
    Owner,
    StatusBatch,
    SubmitRequest,
)
from bridge.batchscript import is_utf8
from bridge.output import read_owned
from bridge.plugin_settings import parse_settings
from slurm_adapter import hostlist
from slurm_adapter.cli import SlurmCli
from slurm_adapter.dialects import (
    V0_0_38,
    Dialect,
    UnsupportedOption,
    dialect_for,
    dialect_from_meta,
    negotiate,
    served_versions,
)
from slurm_adapter.launch import LAUNCH_FAILURE, launch_failure_detail
from slurm_adapter.rest import JwtSigner, ScontrolTokens, SlurmRestClient, TokenSource
from slurm_adapter.script import (
    COMMENT_PREFIX,
    DEFAULT_OUTPUT,
    expand_output_pattern,
    job_environment,
    job_spec,
    render_script,
    rest_job,
    sbatch_args,
)
from slurm_adapter.settings import SlurmSettings
from slurm_adapter.topology import parse_topology

__all__ = ["SlurmBackend", "backend_state", "create", "job_from_slurm", "node_from_slurm"]

log = structlog.get_logger(__name__)

#: At most this much output per :meth:`SlurmBackend.read_log` call.

_BASE_STATES: dict[str, BackendState] = {
    "PENDING": BackendState.PENDING,
    "RUNNING": BackendState.RUNNING,
    "SUSPENDED": BackendState.SUSPENDED,
    "COMPLETED": BackendState.COMPLETED,
    "CANCELLED": BackendState.CANCELLED,
    "FAILED": BackendState.FAILED,
    "TIMEOUT": BackendState.TIMEOUT,
    "NODE_FAIL": BackendState.FAILED,
    "PREEMPTED": BackendState.FAILED,
    "BOOT_FAIL": BackendState.FAILED,
    "DEADLINE": BackendState.FAILED,
    "OUT_OF_MEMORY": BackendState.FAILED,
}
#: State flags that override the base state, in Slurm's own order of precedence
#: (``job_state_string``: a COMPLETING job shows as COMPLETING, whatever its base).
_FLAG_STATES: tuple[tuple[str, BackendState], ...] = (
    ("COMPLETING", BackendState.RUNNING),
    ("STAGE_OUT", BackendState.RUNNING),
    ("CONFIGURING", BackendState.PENDING),
    ("POWER_UP_NODE", BackendState.PENDING),
    ("RESIZING", BackendState.RUNNING),
    ("REQUEUED", BackendState.PENDING),
    ("REQUEUE_FED", BackendState.PENDING),
    ("REQUEUE_HOLD", BackendState.PENDING),
    ("SPECIAL_EXIT", BackendState.PENDING),
    ("RESV_DEL_HOLD", BackendState.PENDING),
    ("STOPPED", BackendState.SUSPENDED),
    ("REVOKED", BackendState.CANCELLED),
    ("LAUNCH_FAILED", BackendState.FAILED),
    ("RECONFIG_FAIL", BackendState.FAILED),
    ("SIGNALING", BackendState.RUNNING),
)
#: Node states/flags under which a node takes no new work (its free capacity is 0).
_UNUSABLE_NODE = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "UNKNOWN",
    "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "MAINTENANCE",
    "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID", "INVALID_REG",
})


def backend_state(names: Iterable[str]) -> BackendState:
    """The bridge state for Slurm's state names (base state and flags, any order)."""
    found = {n.upper() for n in names}
    for flag, state in _FLAG_STATES:
        if flag in found:
            return state
    for name in found:
        if name in _BASE_STATES:
            return _BASE_STATES[name]
    return BackendState.UNKNOWN


def _text(raw: Any) -> str:
    return raw if isinstance(raw, str) else ""


def job_from_slurm(raw: Mapping[str, Any], dialect: Dialect) -> BackendJob | None:
    """A :class:`BackendJob` for one Slurm job record, or None if the bridge did not
    submit it (its comment lacks the ``hpc-bridge:`` prefix)."""
    comment = _text(raw.get("comment"))
    # The user's own --comment follows the key after a space.
    job_uid = comment[len(COMMENT_PREFIX):].partition(" ")[0]
    if not comment.startswith(COMMENT_PREFIX) or not job_uid:
        return None
    job_id = dialect.number(raw.get("job_id"))
    if job_id is None:
        return None
    names = dialect.states(raw.get("job_state"))
    state = backend_state(names)
    completing = "COMPLETING" in names
    ended = state.finished or completing

    start = dialect.number(raw.get("start_time"))
    end = dialect.number(raw.get("end_time"))
    exit_code, signal = (dialect.exit_status(raw.get("exit_code")) if state.finished
                         else (None, None))
    try:
        nodes = tuple(hostlist.expand(_text(raw.get("nodes"))))
    except hostlist.HostlistError as exc:
        log.warning("job %s: %s", job_id, exc)
        nodes = ()

    array_job = dialect.number(raw.get("array_job_id")) or None
    array_task = dialect.number(raw.get("array_task_id"))
    default_out = "slurm-%A_%a.out" if array_job else DEFAULT_OUTPUT
    out_pattern = _text(raw.get("standard_output")) or default_out
    err_pattern = _text(raw.get("standard_error")) or out_pattern
    chdir = _text(raw.get("current_working_directory")) or "/"

    def resolve(pattern: str) -> str:
        return expand_output_pattern(
            pattern, job_id, _text(raw.get("name")), _text(raw.get("user_name")), chdir,
            array_job_id=array_job, array_task_id=array_task,
            node=_text(raw.get("batch_host")) or None,
        )

    stdout, stderr = resolve(out_pattern), resolve(err_pattern)
    reason = _text(raw.get("state_reason"))
    description = _text(raw.get("state_description"))
    detail: str | None = None
    owner_uid = dialect.number(raw.get("user_id"))
    if state is BackendState.FAILED and reason == LAUNCH_FAILURE and (signal or 0) >= 32:
        # Not a signal the script got (a script killed by SIGKILL also reads
        # JobLaunchFailure, with signal 9) but slurmd's error code: say which output
        # file could not be opened instead of "killed by signal 53".
        exit_code, signal = None, None
        detail = _launch_detail(job_id, (stdout, stderr), owner_uid)
    if description:
        reason = f"{reason}: {description}" if reason and reason != "None" else description
    return BackendJob(
        backend_id=str(job_id),
        job_uid=job_uid,
        state=state,
        native_state="+".join(names) or "UNKNOWN",
        exit_code=exit_code,
        signal=signal,
        reason=reason if reason and reason != "None" else None,
        nodes=nodes,
        start_time=float(start) if start and state is not BackendState.PENDING else None,
        end_time=float(end) if end and ended else None,
        stdout_path=stdout,
        stderr_path=stderr,
        queue=str(raw.get("partition") or "") or None,
        owner_uid=owner_uid,
        detail=detail,
    )


@functools.lru_cache(maxsize=4096)
def _launch_detail(job_id: object, paths: tuple[str, str], owner_uid: int | None) -> str:
    """:func:`launch_failure_detail`, once per failed job: a finished job stays in every
    listing for MinJobAge, and the explanation walks directories and the user database
    (on the event loop) that need not be walked at every poll."""
    return launch_failure_detail(paths, owner_uid)


def _split_gres(text: str) -> list[str]:
    """``gpu:a100:2(S:0-1),mps:100`` -> items (commas inside parentheses kept)."""
    items, depth, current = [], 0, ""
    for c in text:
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += c
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def gpu_count(gres: str) -> int:
    """The number of GPUs in a gres string (``gpu:2``, ``gpu:a100:4(S:0-1)``)."""
    total = 0
    for item in _split_gres(gres):
        parts = re.sub(r"\(.*\)$", "", item).split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        m = re.match(r"^(\d+)", count)
        total += int(m.group(1)) if m else 1
    return total


def node_from_slurm(raw: Mapping[str, Any], dialect: Dialect) -> NodeInfo:
    """A :class:`NodeInfo` for one Slurm node record (slurmrestd ``/nodes``, ``sinfo --json``).

    ``state`` is Slurm's, upper case, flags joined by ``+`` (``IDLE+DRAIN``). A node
    that cannot take work (down, drained, not responding …) has no free capacity.
    """
    states = list(dialect.states(raw.get("state")))
    flags = raw.get("state_flags")
    if isinstance(flags, list):
        states += [str(f).upper() for f in flags if str(f).upper() not in states]
    cpus = dialect.number(raw.get("cpus")) or 0
    alloc_cpus = dialect.number(raw.get("alloc_cpus")) or 0
    memory = dialect.number(raw.get("real_memory")) or 0
    alloc_memory = dialect.number(raw.get("alloc_memory")) or 0
    gpus = gpu_count(_text(raw.get("gres")))
    used_gpus = gpu_count(_text(raw.get("gres_used")))
    usable = not (set(states) & _UNUSABLE_NODE)
    partitions = raw.get("partitions")
    features = raw.get("active_features") or raw.get("features")
    return NodeInfo(
        name=_text(raw.get("name")),
        state="+".join(states) or "UNKNOWN",
        cpus=cpus,
        free_cpus=max(cpus - alloc_cpus, 0) if usable else 0,
        memory_mb=memory,
        free_memory_mb=max(memory - alloc_memory, 0) if usable else 0,
        gpus=gpus,
        free_gpus=max(gpus - used_gpus, 0) if usable else 0,
        partitions=tuple(str(p) for p in partitions) if isinstance(partitions, list) else (),
        features=dialect.features(features),
    )


def _prefer(a: BackendJob, b: BackendJob) -> BackendJob:
    """Of two Slurm jobs with one uid: the unfinished one, else the newest."""
    if a.state.finished != b.state.finished:
        return b if a.state.finished else a
    return a if int(a.backend_id) > int(b.backend_id) else b



def _convert_listing(raw_jobs: list[Any], dialect: Dialect
                     ) -> tuple[list[BackendJob], dict[str, int]]:
    """The bridge's jobs in a Slurm listing (see :meth:`SlurmBackend._bridge_jobs`) and
    every listed job's owner uid by Slurm id. Pure: safe in a worker thread."""
    by_key: dict[tuple[str, int | None], BackendJob] = {}
    owners: dict[str, int] = {}
    for raw in raw_jobs:
        if not isinstance(raw, dict):
            continue
        job = job_from_slurm(raw, dialect)
        if job is None:
            continue
        if job.owner_uid is not None:
            owners[job.backend_id] = job.owner_uid
        key = (job.job_uid, job.owner_uid)
        seen = by_key.get(key)
        by_key[key] = job if seen is None else _prefer(seen, job)
    return list(by_key.values()), owners

class SlurmBackend:
    """Slurm through slurmrestd (preferred) or its commands.

    It honours the sbatch options the bridge passes as they are
    (:mod:`bridge.slurm_options`: ``passes_slurm_options``); a job carrying one is
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

    The topology always comes from ``scontrol show topology`` (slurmrestd 0.0.38
    has no topology endpoint); without ``scontrol`` the inventory has no switches.
    """

    #: The engine admits jobs carrying options only Slurm honours (bridge/slurm_options.py).
    passes_slurm_options = True

    def __init__(self, name: str, *, cli: SlurmCli, rest: SlurmRestClient | None = None,
                 default_partition: str | None = None, rest_user: str | None = None,
                 mpi_launch: str | None = None, negotiate_version: bool = False):
        self.name = name
        #: Pick the REST dialect from the server's OpenAPI document at start.
        self.negotiate_version = negotiate_version
        self.mpi_launch = mpi_launch or default_mpi_launch()
        self.cli = cli
        self.rest = rest
        self.default_partition = default_partition
        self.rest_user = rest_user or _user_name(os.geteuid())
        #: Slurm job id -> uid of its owner, from the last listing (for read_log).
        self._owner_uids: dict[str, int] = {}
        #: The last REST job listing and when it was asked for (for ``update_time``).
        self._listing_cache: list[Any] | None = None
        self._listed_at = 0
        #: The last listing converted (the very list object) and what it gave.
        self._converted: tuple[list[Any], list[BackendJob]] | None = None

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

    async def submit(self, request: SubmitRequest) -> str:
        """Submit as ``request.owner``; the Slurm job id. See the module docstring."""
        spec = job_spec(request, default_chdir=request.owner.home(),
                        default_partition=self.default_partition)
        script = render_script(request, self.mpi_launch)
        env = job_environment(request.plan)
        # What a login shell gives the owner, unless the plan says otherwise: Open MPI 5+
        # refuses to start without HOME ("Unable to get the user home directory").
        for key, value in (("HOME", request.owner.home()), ("USER", request.owner.user),
                           ("LOGNAME", request.owner.user)):
            env.setdefault(key, value)
        # With --export-file, slurmd 22.05 expands %x in --output from the job's
        # SLURM_JOB_NAME variable, not from the job record: without it the file is
        # "(null)-<id>.out". sbatch sets it only when exporting its own environment.
        cli_env = {**env, "SLURM_JOB_NAME": spec.name}
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

    async def _listing(self) -> tuple[list[Any], Dialect]:
        if self.rest is not None:
            # Ask "anything changed since the last listing?" (a few seconds of margin
            # for clock skew with slurmctld); 304 means the cached listing holds.
            rest = await self._rest_client()
            asked_at = int(time.time())
            since = self._listed_at - 5 if self._listing_cache is not None else None
            answer = await rest.jobs(self.rest_user, changed_since=since)
            dialect = rest.dialect
            if answer is None and self._listing_cache is not None:
                return self._listing_cache, dialect
            data = answer or {}
            jobs = data.get("jobs")
            self._listing_cache = jobs if isinstance(jobs, list) else []
            self._listed_at = asked_at
            return self._listing_cache, dialect
        else:
            data = await self.cli.jobs()
            dialect = dialect_from_meta(data.get("meta"))
        jobs = data.get("jobs")
        return (jobs if isinstance(jobs, list) else []), dialect

    async def _bridge_jobs(self) -> list[BackendJob]:
        """All the jobs carrying a bridge key, from one listing, each with its owner
        (Slurm ``user_id``). Of several jobs with one key and one owner, the unfinished
        one (else the newest); jobs of other owners are all kept, for the engine to
        tell the real one from a forgery (:mod:`bridge.ownership`).

        The listing is converted in a worker thread (thousands of jobs: a tenth of a
        second), and only when it changed: when slurmrestd answers "nothing changed"
        the last conversion is the answer."""
        raw_jobs, dialect = await self._listing()
        if self._converted is not None and self._converted[0] is raw_jobs:
            return self._converted[1]
        jobs, owners = await asyncio.to_thread(_convert_listing, raw_jobs, dialect)
        # Only what Slurm still holds: bounded by Slurm's own job table.
        self._owner_uids = owners
        self._converted = (raw_jobs, jobs)
        return jobs

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        """The Slurm jobs carrying these uids, with their owners, from one listing of
        all jobs (see :meth:`_bridge_jobs`)."""
        wanted = set(job_uids)
        return [job for job in await self._bridge_jobs() if job.job_uid in wanted]

    async def watch(self, interval: float) -> AsyncGenerator[StatusBatch, None]:
        """A complete snapshot of the bridge's jobs every ``interval`` seconds (one
        listing each). While Slurm cannot be reached nothing is yielded; never raises."""
        while True:
            try:
                jobs = await self._bridge_jobs()
            except BackendError as exc:
                log.warning("slurm back end %s: no status this round: %s", self.name, exc)
            except Exception:
                log.exception("slurm back end %s: unexpected error reading job status",
                              self.name)
            else:
                yield StatusBatch(jobs=tuple(jobs), complete=True, at=time.time())
            await asyncio.sleep(interval)

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        """Cancel as ``owner`` (SIGKILL request: Slurm sends SIGTERM, then SIGKILL after
        KillWait). A finished or unknown job is not an error."""
        if self.rest is not None:
            await (await self._rest_client()).cancel(owner.user, backend_id)
        else:
            await self.cli.cancel(backend_id, owner)

    # --- inventory --------------------------------------------------------------------

    async def inventory(self) -> Inventory:
        """Nodes (slurmrestd ``/nodes`` or ``sinfo --json``) and the switch tree
        (``scontrol show topology``)."""
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
        switches: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        if self.cli.has("scontrol"):
            try:
                switches = parse_topology(await self.cli.topology())
            except hostlist.HostlistError as exc:
                log.warning("slurm back end %s: unreadable topology: %s", self.name, exc)
        return Inventory(nodes=tuple(nodes.values()), switches=switches)

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
            owner_uid = self._owner_uids.get(job.backend_id)
        if owner_uid is None:
            try:
                await self._bridge_jobs()
            except BackendError as exc:
                log.info("read_log: cannot learn the owner of job %s: %s", job.backend_id, exc)
            owner_uid = self._owner_uids.get(job.backend_id)
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
                        negotiate_version=not s.cli_only and version == "auto")
