"""The one seam between the engine and a world (Slurm, Flux, Kubernetes).

The engine holds back ends only through :class:`Backend`; it never knows which
one it has. A back end never decides policy (when to retry, what a state means
for the TrainJob): it submits, cancels, looks up and reports.

Errors a back end raises:

* :class:`BackendUnavailable` — the world cannot be reached now (daemon down,
  timeout, 5xx). The engine retries with backoff; nothing is lost.
* :class:`BackendRejected` — the world refused this job for good (bad partition,
  impossible request, unknown user). The engine fails the job with the message.

Back ends are found by name through the ``hpc_bridge.backends`` entry-point group,
so ``bridge`` never imports an adapter (see docs/architecture.md).
"""

from __future__ import annotations

import pwd
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from bridge.arrays import ArrayTask
from bridge.errors import BridgeError
from bridge.model import TrainJob

# Re-exported: the seam's users keep importing them from here.
from bridge.nodes import Inventory as Inventory
from bridge.nodes import NodeInfo as NodeInfo
from bridge.nodes import Units as Units
from bridge.placement import Placement
from bridge.runtimes import LaunchPlan
from bridge.scheduling import SchedulingOptions
from bridge.shape import JobShape, resolve_shape


class BackendError(BridgeError):
    """Base of back-end errors."""


class BackendUnavailable(BackendError):
    """Transient: the back end cannot be reached now. Retry later."""


class BackendRejected(BackendError):
    """Permanent: the back end refused the job. Do not retry."""


class AdmissionDenied(BackendRejected):
    """At admission: the caller may not run this job on this back end (the API answers
    403 with the message, which names the field or the setting)."""


@dataclass(frozen=True)
class Owner:
    """The Unix user a job runs as (from the API caller's peer credentials)."""

    uid: int
    gid: int
    user: str

    def home(self) -> str:
        """The user's home directory (``/tmp`` when it has none): the working
        directory of a job that names none, as for sbatch."""
        try:
            return pwd.getpwnam(self.user).pw_dir or "/tmp"  # noqa: S108 - a default cwd
        except KeyError:
            return "/tmp"  # noqa: S108


@dataclass(frozen=True)
class SubmitRequest:
    """Everything a back end needs to start a job."""

    #: The TrainJob uid: the idempotency key the back-end job must carry.
    job_uid: str
    #: The bridge's own short id (what ``tqueue`` shows), for names and ``%``-patterns.
    job_id: int
    job: TrainJob
    plan: LaunchPlan
    options: SchedulingOptions
    owner: Owner
    #: Hosts the back end must run the job on (the engine's placement, in placement mode
    #: ``nodelist``). ``None``: the back end chooses (modes ``constraints`` and ``none``).
    placement: Placement | None = None
    #: The job's shape (:mod:`bridge.shape`), resolved at admission and stored; what the
    #: renderers render. ``None`` (a request built by hand): :attr:`job_shape` resolves it.
    shape: JobShape | None = None
    #: A task of a job array (bridge/arrays.py): its output patterns and environment
    #: name the array (:func:`bridge.jobid.pin_job_id`, :func:`~bridge.jobid.identity_env`).
    array: ArrayTask | None = None
    #: A dependency not met yet, in the back end's own job ids (sbatch's syntax), for a
    #: back end with ``native_dependencies`` (bridge/engine_dependency.py): it queues
    #: the job with it (``options.kill_on_invalid_dep`` applies). None: no wait.
    dependency: str | None = None
    #: Where the job reports its progress (bridge/trainer_status.py ``status_env``): set
    #: in its environment by back ends whose jobs read the daemon host's files (Slurm,
    #: Flux); empty when progress reports are off.
    status_env: Mapping[str, str] = field(default_factory=dict)
    #: The same for a back end that runs pods (``runs_pods``), which cannot read the
    #: daemon host's files: ``url`` (the job's endpoint), ``token`` and ``ca.crt`` (PEM),
    #: for it to mount as Trainer does; empty when progress reports are off.
    status_secret: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def job_shape(self) -> JobShape:
        """:attr:`shape`, else the shape of ``job``, ``plan`` and ``options``."""
        if self.shape is not None:
            return self.shape
        return resolve_shape(self.job, self.plan, self.options)


class BackendState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    UNKNOWN = "UNKNOWN"

    @property
    def finished(self) -> bool:
        return self in (BackendState.COMPLETED, BackendState.FAILED, BackendState.CANCELLED,
                        BackendState.TIMEOUT)


@dataclass(frozen=True)
class BackendJob:
    """What a back end knows about one of the bridge's jobs."""

    backend_id: str
    job_uid: str
    state: BackendState
    #: The world's own state name (``OUT_OF_MEMORY``, ``NODE_FAIL`` …), for messages.
    native_state: str = ""
    exit_code: int | None = None
    #: Signal that ended the job, if any.
    signal: int | None = None
    reason: str | None = None
    nodes: tuple[str, ...] = ()
    start_time: float | None = None
    end_time: float | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    #: Unix uid of the job's owner, when the caller knows it (``read_log`` checks that
    #: the output file belongs to it before a root daemon reads it). Back ends report
    #: the world's owner (Slurm ``user_id``, Flux ``userid``): the engine adopts or
    #: tracks a job only when it is the stored job's (:mod:`bridge.ownership`).
    owner_uid: int | None = None
    #: The namespace the world keeps the job in (a JobSet's), when it has namespaces;
    #: it must be the stored job's (:mod:`bridge.ownership`).
    namespace: str | None = None
    #: Where the world queued it: Slurm partition, Flux queue, Kueue LocalQueue.
    queue: str | None = None
    #: Why it ended, in words, when the world says more than a state (the failing pod's
    #: container status); appended to the job's message.
    detail: str | None = None
    #: The reason a failed job ends with, when the back end knows it better than its
    #: exit status says (k8s-on-slurm: ``AllocationEnded``); else it comes from the exit
    #: code or signal (bridge/outcome.py).
    failure_reason: str | None = None
    #: The back end's own words kept beside the job's key (Slurm: the comment after
    #: it), e.g. what made the job (k8s-on-slurm's holders).
    note: str | None = None


@dataclass(frozen=True)
class StatusBatch:
    """One step of a back end's status stream.

    ``complete`` is True when ``jobs`` is a full snapshot of all the bridge's jobs the
    back end knows about (a poll); then a tracked job missing from it is gone from the
    world. Event-driven back ends send ``complete=False`` batches of changes.
    """

    jobs: tuple[BackendJob, ...]
    complete: bool
    at: float


@runtime_checkable
class Backend(Protocol):
    """A world that runs jobs. All methods may raise :class:`BackendUnavailable`."""

    #: Name the back end is configured under (``slurm``, ``flux``, ``kubernetes`` …).
    #: A back end may also set ``packs_units = True`` when a node of a job is a pod that
    #: may share a host with others (the engine then places pods, not whole hosts), and
    #: ``runs_pods = True`` when it lays out ``spec.podSpecOverrides`` and
    #: ``spec.runtimePatches`` (the others refuse a job that carries them). One that runs
    #: no pods runs a job's ``spec.trainer.image`` only through the command of
    #: ``container_command`` (words, ``{image}`` in them), where it has one; admission
    #: refuses the image otherwise, naming ``container_setting`` (the setting that
    #: would configure it), never ignores it.
    name: str

    async def start(self) -> None:
        """Connect; raise :class:`BackendUnavailable` with the reason if it cannot."""

    async def close(self) -> None:
        """Release connections and tasks."""

    async def submit(self, request: SubmitRequest) -> str:
        """Start the job; return its back-end id. Carries ``request.job_uid`` so that
        :meth:`lookup` can find it later. Raises :class:`BackendRejected` if refused."""

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        """Every back-end job carrying one of these uids, whoever owns it (absent uids
        are not in the world; a uid may be carried by several jobs, e.g. another user's
        forgery: the engine keeps the one whose owner matches). One query for all."""

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        """Ask the world to stop the job. Cancelling a finished job is not an error."""

    def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
        """Status of all the bridge's jobs, forever: snapshots (one query per interval)
        or event batches. Raises nothing: outages show as a pause in the stream. Every
        job carrying a key is reported with its owner, as :meth:`lookup` does."""

    async def inventory(self) -> Inventory:
        """Nodes with free capacity and the topology above them."""

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        """Output of the job from ``offset``: (data, new offset). ``stream`` is
        ``stdout`` or ``stderr``. Missing output gives ``(b"", offset)``; a file that
        does not belong to ``job.owner_uid`` (or a link, or not a regular file) raises
        :class:`bridge.output.OutputRefused` with the reason."""


@runtime_checkable
class Suspendable(Protocol):
    """A back end that can suspend and resume a job it runs (Kubernetes: the JobSet's
    ``spec.suspend``; Slurm: requeue held, or hold, and release). The engine suspends
    jobs of other back ends only before they are submitted."""

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        """Suspend (``True``) or resume the job of ``owner`` (as whom the back end
        acts where its world checks the user); idempotent."""


@runtime_checkable
class QueueHolding(Protocol):
    """A back end that can hold a job waiting in its queue, and release it, with an
    administrator's hold that the job's owner cannot release (Slurm: ``scontrol
    hold``/``release``; a hold by root is ``JobHeldAdmin``), for ``tcontrol hold`` of a
    job already submitted."""

    async def hold_in_queue(self, backend_id: str, hold: bool, owner: Owner) -> None:
        """Hold (``True``) or release the waiting job, as ``owner`` (root: an
        administrator's hold); :class:`BackendRejected` for a job that is not waiting
        (it started, or ended): a hold never takes a job off its nodes."""


@runtime_checkable
class Estimating(Protocol):
    """A back end that can say when and where a job would start without submitting it
    (Slurm: ``sbatch --test-only``), for ``tbatch --test-only``."""

    async def estimate(self, request: SubmitRequest) -> str:
        """The world's estimate, one line; :class:`BackendRejected` when it would refuse
        the job, :class:`BackendUnavailable` when it cannot say now."""


@runtime_checkable
class Validating(Protocol):
    """A back end that can tell, without the world, whether it could submit a job (Flux:
    the jobspec builds), so that admission refuses (400) what submission would."""

    def validate(self, request: SubmitRequest) -> None:
        """Raise :class:`BackendRejected` naming what it cannot submit, else nothing."""


@runtime_checkable
class Admitting(Protocol):
    """A back end with its own admission rules (Kubernetes: who may run where)."""

    def check_admission(self, job: TrainJob, plan: LaunchPlan, owner: Owner,
                        origin: str) -> None:
        """Called by the engine before a job is stored. Raise :class:`AdmissionDenied`
        (or ``bridge.model.ValidationError``) to refuse it; may fill what the user left
        empty (``metadata.namespace``). ``origin`` is the front door (``api``,
        ``kubernetes``)."""


@runtime_checkable
class ReportsJobsStatus(Protocol):
    """A back end that can say how a job's replicated jobs stand, in the shape of a
    TrainJob's ``status.jobsStatus`` (Kubernetes: the JobSet's
    ``replicatedJobsStatus``). Front doors ask through this seam, never a concrete
    class, so a wrapped back end (metrics) answers too."""

    def jobs_status(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        """The job's ``jobsStatus`` in ``namespace`` (None when not known)."""

    def on_jobs_status(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(job_uid)`` whenever what :meth:`jobs_status` says of a job
        may have changed (its job's state may not: a pod became ready); the function
        returned stops it."""


ENTRY_POINT_GROUP = "hpc_bridge.backends"


def load_plugin(group: str, noun: str, kind: str, name: str, settings: dict[str, Any]) -> Any:
    """Call the entry point ``kind`` of ``group`` with ``(name, settings)``.

    Raises ``ValueError`` naming the known kinds if ``kind`` is not registered, or with
    the import error if the adapter cannot be loaded (e.g. the ``flux`` module is
    missing); ``noun`` ("back end", "front door") words the messages.
    """
    eps = {ep.name: ep for ep in entry_points(group=group)}
    if kind not in eps:
        raise ValueError(f"unknown {noun} kind {kind!r}; known: {', '.join(sorted(eps))}")
    try:
        factory = eps[kind].load()
    except ImportError as exc:
        raise ValueError(f"{noun} {kind!r} cannot be loaded: {exc}") from exc
    return factory(name, settings)


def load_backend(kind: str, name: str, settings: dict[str, Any]) -> Backend:
    """Build the back end registered as ``kind`` in the ``hpc_bridge.backends`` group
    (a callable ``(name, settings) -> Backend``); ValueError as :func:`load_plugin`."""
    backend = load_plugin(ENTRY_POINT_GROUP, "back-end", kind, name, settings)
    if not isinstance(backend, Backend):
        raise ValueError(f"entry point {kind!r} did not build a Backend")
    return backend
