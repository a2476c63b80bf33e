"""GPUs per node from sbatch's GPU options, for the back ends that count GPUs per node.

Slurm takes ``--gres``, ``--gpus`` and ``--gpus-per-task`` as they are
(slurm_adapter). Kubernetes (a pod's ``nvidia.com/gpu``) and Flux (the ``gpu`` vertex of
a node's slot) count GPUs per node, so there the options are honoured where they
come to a whole number of GPUs on each node, as Slurm would place them:

* ``--gres=gpu[:N]`` (N per node, 1 without N), in a list with other names refused;
* ``--gpus=N``: N for the whole job, N / nodes on each when that divides evenly;
* ``--gpus-per-task=N``: N x the tasks on a node;
* several of them, with ``--gpus-per-node``, must agree on the count.

A GPU type (``gpu:a100:2``, ``--gpus=a100:2``) is refused: neither back end has a type
in its request (a node label does that: ``--constraint``).

Contract: :func:`gpus_per_node` is the count (None when no GPU option is set) or a
:class:`ValueError` saying why the options have no count per node;
:func:`from_gpu_options` is the count ``--gres``/``--gpus``/``--gpus-per-task`` alone
give, or None (none set, or no count per node): the job shape's GPUs when
``--gpus-per-node`` and ``resourcesPerNode`` say none, which Slurm is then not asked
for again (it has the options themselves). Pure.
"""

from __future__ import annotations

import re

from bridge.scheduling import SchedulingOptions

__all__ = ["GPU_FIELDS", "first_gpu_field", "from_gpu_options", "gpus_per_node"]

#: The options passed to Slurm as they are that come to GPUs per node here.
GPU_FIELDS = ("gres", "gpus", "gpus_per_task")


def first_gpu_field(options: SchedulingOptions) -> str | None:
    """The first of :data:`GPU_FIELDS` ``options`` set: the one a refusal goes under
    (once, not once per option)."""
    return next((f for f in GPU_FIELDS if getattr(options, f)), None)


_COUNT = re.compile(r"[0-9]{1,6}")
_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")


def _count(value: str, shown: str) -> int:
    """The count of ``[TYPE:]N`` (``shown``: the option as the user gave it)."""
    kind, _, number = value.rpartition(":")
    if kind:
        raise ValueError(f"{shown} names a GPU type ({kind[:64]!r}), which this back end "
                         "cannot ask for: ask for the count, and the type with --constraint")
    if not _COUNT.fullmatch(number):
        raise ValueError(f"{shown}: the count must be a number of GPUs (0 to 999999)")
    return int(number)


def _gres(value: str) -> int | None:
    """The GPUs per node ``--gres`` (``NAME[:TYPE][:COUNT]``, comma-separated) asks for
    (None: it names no gpu)."""
    found: int | None = None
    for item in value.split(","):
        name, *rest = item.split(":")
        if name != "gpu":
            raise ValueError(f"--gres names {name[:64]!r}: only gpu has a meaning on this "
                             "back end")
        if found is not None:
            raise ValueError("--gres names gpu twice")
        if len(rest) > 2 or (rest and not (_COUNT.fullmatch(rest[-1])
                                           or (len(rest) == 1 and _TYPE.fullmatch(rest[0])))):
            raise ValueError(f"--gres={item[:64]}: not NAME[:TYPE][:COUNT]")
        if rest and not _COUNT.fullmatch(rest[-1]):  # gpu:TYPE: one of that type
            rest = [*rest, "1"]
        found = _count(":".join(rest) if rest else "1", f"--gres={item}")
    return found


def gpus_per_node(options: SchedulingOptions, nodes: int, tasks_per_node: int
                  ) -> int | None:
    """The GPUs on each of ``nodes`` that ``options`` ask for with ``tasks_per_node``
    tasks on a node (module docstring)."""
    asked: dict[str, int] = {}
    if options.gpus_per_node is not None:
        asked["--gpus-per-node"] = options.gpus_per_node
    if options.gres:
        gres = _gres(options.gres)
        if gres is not None:
            asked["--gres"] = gres
    if options.gpus:
        total = _count(options.gpus, f"--gpus={options.gpus}")
        if total % max(nodes, 1):
            raise ValueError(f"--gpus={total} does not divide evenly over {nodes} nodes, and "
                             "this back end gives every node as many")
        asked["--gpus"] = total // max(nodes, 1)
    if options.gpus_per_task:
        if options.ntasks and options.ntasks_per_node is None and options.ntasks % max(
                nodes, 1):
            raise ValueError(f"--gpus-per-task with --ntasks={options.ntasks} over {nodes} "
                             "nodes: the nodes would run different numbers of tasks")
        asked["--gpus-per-task"] = _count(
            options.gpus_per_task, f"--gpus-per-task={options.gpus_per_task}") * max(
            tasks_per_node, 1)
    if len(set(asked.values())) > 1:
        said = ", ".join(f"{flag}: {n}" for flag, n in asked.items())
        raise ValueError(f"the GPU options ask for different GPUs per node ({said})")
    return next(iter(asked.values()), None)


def from_gpu_options(options: SchedulingOptions, nodes: int, tasks_per_node: int
                     ) -> int | None:
    """The GPUs per node ``--gres``, ``--gpus`` and ``--gpus-per-task`` give (module
    docstring); None when they give none."""
    if not (options.gres or options.gpus or options.gpus_per_task):
        return None
    try:
        return gpus_per_node(options.model_copy(update={"gpus_per_node": None}), nodes,
                             tasks_per_node)
    except ValueError:
        return None
