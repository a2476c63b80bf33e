"""The job shape: what a job *is*, resolved once at admission and stored with it.

A :class:`JobShape` is worked out by :func:`resolve_shape` from the TrainJob, its
runtime (the :class:`bridge.runtimes.LaunchPlan`) and its scheduling options, in
:meth:`bridge.engine.Engine.prepare`, and kept in the store (``jobs.shape``). Every
back end renders the same shape; the engine hands the stored one to the back end and
never resolves a stored job again. It is also the job's *runtime snapshot* (as
Kubeflow Trainer keeps one): editing a runtime file later never changes a job that
was admitted already.

Precedence, the same for every resource (see docs/architecture.md, "Job shape"):
an explicit scheduling option (``tbatch``/``#SBATCH``, the ``hpc-bridge.io/scheduling``
annotation) > ``spec.trainer.resourcesPerNode`` (``requests``, else ``limits``) >
the runtime's template > nothing (the back end's default). ``tbatch`` writes the
same values into both, so for its jobs the two agree.

Contract: :func:`resolve_shape` is pure and raises
:class:`bridge.model.ValidationError` naming the field for a malformed quantity;
:meth:`JobShape.to_json` / :meth:`JobShape.from_json` round-trip exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from bridge.gpu_options import from_gpu_options
from bridge.model import TrainJob, ValidationError
from bridge.runtimes import Framework, LaunchPlan, MpiImplementation
from bridge.scheduling import SchedulingOptions
from bridge.topology import cpu_millis, memory_mb

__all__ = ["GPU_RESOURCE", "SHAPE_VERSION", "JobShape", "MpiImplementation",
           "resolve_shape", "resources_of"]

#: Version of the stored form (``jobs.shape``); a row with another is resolved again.
SHAPE_VERSION = 1
#: The extended resource that counts GPUs in ``resourcesPerNode``.
GPU_RESOURCE = "nvidia.com/gpu"
_RESOURCES = "spec.trainer.resourcesPerNode"
#: The largest CPU count, GPU count or memory (MiB) per node a job may ask for (2**31).
MAX_QUANTITY = 2**31


class JobShape(BaseModel):
    """Nodes, ranks, resources per node, time limit, MPI implementation and the
    framework's launch plan of one job. ``None`` means "nothing asked": the back end's
    default applies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = SHAPE_VERSION
    #: The runtime's launch plan merged with the TrainJob (the runtime snapshot).
    plan: LaunchPlan
    nodes: int
    #: Processes per node, when anything says (options, else the runtime for a
    #: distributed framework); ``None``: the launcher or the back end decides.
    ranks_per_node: int | None
    #: Total tasks (``--ntasks``), when given.
    ntasks: int | None
    cpus_per_task: int | None
    #: CPUs per node asked for (cores, rounded up); ``None``: nothing asked. Slurm and
    #: Flux allocate whole CPUs per rank (``cpus_per_task`` x ranks, which may be more
    #: when the CPUs do not divide over the ranks); the JobSet asks for exactly this.
    cpus_per_node: int | None
    #: The same in millicores, unrounded (``500m`` stays 500: what placement counts).
    cpu_millis_per_node: int | None
    gpus_per_node: int | None
    mem_per_node_mb: int | None
    #: The resources (``cpu``, ``memory``, ``nvidia.com/gpu``) an explicit scheduling
    #: option set; the others came from ``resourcesPerNode`` or are unset. (What a back
    #: end that cannot set one names when it refuses; the JobSet keeps the user's own
    #: quantity strings for the others.)
    from_options: frozenset[str] = frozenset()
    time_limit_minutes: int | None
    mpi: MpiImplementation | None

    @property
    def framework(self) -> Framework:
        return self.plan.framework

    @property
    def mpi_flavour(self) -> str:
        """``mpi-launch --mpi`` for this job (``openmpi`` when it is not MPI)."""
        return (self.mpi or MpiImplementation.OPENMPI).flavour

    def to_json(self) -> dict[str, Any]:
        """The stored form (``jobs.shape``)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobShape:
        """The shape from its stored form (raises pydantic's ValidationError if
        malformed, ValueError for another :data:`SHAPE_VERSION`)."""
        if data.get("version") != SHAPE_VERSION:
            raise ValueError(f"job shape version {data.get('version')!r} is not "
                             f"{SHAPE_VERSION}")
        return cls.model_validate(dict(data))


def resources_of(job: TrainJob,
                 runtime: Mapping[str, Any] | None = None) -> Mapping[str, str | int | float]:
    """What a node pod asks for: the runtime trainer's ``resources`` (``runtime``:
    ``LaunchPlan.resources``) with ``spec.trainer.resourcesPerNode`` merged over them
    name by name, as Trainer merges them into the pod; the ``requests``, each completed
    by ``limits`` (as in Kubernetes, a limit alone stands for the request); empty when
    neither gives any."""
    trainer = job.spec.trainer
    res = trainer.resources_per_node if trainer else None
    runtime = runtime or {}
    limits = {**(runtime.get("limits") or {}), **((res.limits if res else None) or {})}
    requests = {**(runtime.get("requests") or {}), **((res.requests if res else None) or {})}
    # requests first: what the job needs; limits stand for requests when only they are
    # given (as in Kubernetes).
    return {**limits, **requests}


def _quantity(resources: Mapping[str, Any], key: str, convert: Any) -> int | None:
    if key not in resources:
        return None
    where = f"{_RESOURCES}.requests[{key}]"
    try:
        value = int(convert(resources[key]))
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValidationError([(where, f"not a quantity: {resources[key]!r} ({exc})")]) from None
    if value > MAX_QUANTITY:
        raise ValidationError([(where, f"{resources[key]!r} is more than any node has "
                                       f"(at most {MAX_QUANTITY} per node)")])
    return value


def ranks_per_node(plan: LaunchPlan, options: SchedulingOptions) -> int | None:
    """Ranks on each node: ``--ntasks-per-node``, else ``--ntasks`` over the nodes
    (rounded up), else the runtime's processes per node (a distributed one's)."""
    return _ranks(plan, options)


def _ranks(plan: LaunchPlan, options: SchedulingOptions) -> int | None:
    if options.ntasks_per_node is not None:
        return options.ntasks_per_node
    if options.ntasks is not None:
        return math.ceil(options.ntasks / max(plan.num_nodes, 1))
    if plan.framework is not Framework.PLAIN:
        return plan.proc_per_node
    return None


def resolve_shape(job: TrainJob, plan: LaunchPlan, options: SchedulingOptions) -> JobShape:
    """The shape of ``job`` (see the module docstring for the precedence).

    CPUs: ``--cpus-per-task`` gives CPUs per task and per node (x ranks per node);
    else ``resourcesPerNode`` ``cpu`` gives CPUs per node and per task (divided over
    the ranks, rounded up). GPUs: ``--gpus-per-node``, else what ``--gres=gpu:N``,
    ``--gpus`` and ``--gpus-per-task`` come to per node (:mod:`bridge.gpu_options`),
    else ``nvidia.com/gpu``.
    Memory: ``--mem``, else ``--mem-per-cpu`` x CPUs per node (tasks per node without
    CPUs), else ``--mem-per-gpu`` x GPUs per node, else ``memory``. Time limit: ``--time``, else
    ``spec.activeDeadlineSeconds`` rounded up to minutes.
    """
    resources = resources_of(job, plan.resources)
    ranks = _ranks(plan, options)
    tasks = ranks or 1
    millis = _quantity(resources, "cpu", cpu_millis)
    if options.cpus_per_task is not None:
        cpus_per_task: int | None = options.cpus_per_task
        cpus_node: int | None = options.cpus_per_task * tasks
        millis = options.cpus_per_task * tasks * 1000
    elif millis is not None:
        cpus_node = max(1, math.ceil(millis / 1000))
        cpus_per_task = max(1, math.ceil(cpus_node / tasks))
    else:
        cpus_per_task = cpus_node = None
    gpus = options.gpus_per_node
    derived = from_gpu_options(options, plan.num_nodes, tasks) if gpus is None else None
    if derived is not None:
        gpus = derived
    if gpus is None:
        gpus = _quantity(resources, GPU_RESOURCE, lambda v: math.ceil(float(v)))
    mem = options.mem_per_node_mb
    per = None  # --mem-per-cpu / --mem-per-gpu, as memory per node
    if mem is None and options.mem_per_cpu_mb:
        per = options.mem_per_cpu_mb * (cpus_node or tasks)
    elif mem is None and options.mem_per_gpu_mb and gpus:
        per = options.mem_per_gpu_mb * gpus
    if per is not None:
        mem = per
    if mem is None:
        mem = _quantity(resources, "memory", memory_mb)
    explicit = {"cpu": options.cpus_per_task,
                "memory": options.mem_per_node_mb if per is None else per,
                GPU_RESOURCE: options.gpus_per_node if derived is None else derived}
    deadline = job.spec.active_deadline_seconds
    limit = options.time_limit_minutes
    if limit is None and deadline:
        limit = math.ceil(deadline / 60)
    return JobShape(
        plan=plan, nodes=plan.num_nodes, ranks_per_node=ranks, ntasks=options.ntasks,
        cpus_per_task=cpus_per_task, cpus_per_node=cpus_node, cpu_millis_per_node=millis,
        gpus_per_node=gpus,
        mem_per_node_mb=mem,
        from_options=frozenset(k for k, v in explicit.items() if v is not None),
        time_limit_minutes=limit,
        mpi=plan.mpi_implementation if plan.framework is Framework.MPI else None)
