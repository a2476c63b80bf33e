"""A TrainJob as a placement request: what :func:`bridge.placement.tree_best_fit` places.

:func:`request_from_job` reads the TrainJob's shape (:func:`bridge.shape.resolve_shape`:
nodes and per-node CPUs, memory and GPUs with the one precedence of the shape) and its
scheduling options (partition, exclusivity, excluded hosts, features) and returns a
:class:`bridge.placement.PlacementRequest`; :func:`features_of` says which
``--constraint`` values the bridge can evaluate. Pure; malformed quantities or host
lists raise ValueError (the engine then leaves the choice to the back end).
"""

from __future__ import annotations

import re

from bridge.hostlist import expand
from bridge.model import TrainJob
from bridge.placement import PlacementRequest
from bridge.runtimes import LaunchPlan
from bridge.scheduling import SchedulingOptions
from bridge.shape import resolve_shape

__all__ = ["features_of", "request_from_job"]

#: A feature: a Slurm feature word, or a Kubernetes node label (``key`` or ``key=value``).
_SIMPLE_FEATURES = re.compile(r"^[A-Za-z0-9_.:/=-]+(?:[&,][A-Za-z0-9_.:/=-]+)*$")


def features_of(constraint: str | None) -> frozenset[str] | None:
    """The features a Slurm ``--constraint`` requires, when it is a plain conjunction
    (``ib``, ``ib&v100``, node labels ``zone=a&gpu``); ``None`` when it is anything
    else (``a|b``, counts, brackets), which the bridge does not evaluate."""
    if not constraint:
        return frozenset()
    if not _SIMPLE_FEATURES.match(constraint):
        return None
    return frozenset(re.split(r"[&,]", constraint))


def request_from_job(job: TrainJob, plan: LaunchPlan,
                     options: SchedulingOptions) -> PlacementRequest:
    """The placement request of a TrainJob: its shape's nodes (:mod:`bridge.shape`),
    each needing the shape's CPUs (in millicores), memory and GPUs per node: what the
    Slurm options ask per node (tasks per node x CPUs per task, ``--mem``,
    ``--gpus-per-node``), else ``resourcesPerNode`` (cpu, memory, ``nvidia.com/gpu``;
    ``requests``, else ``limits``), else one CPU per rank. Partition, ``--exclusive``,
    ``--exclude`` and a plain-conjunction ``--constraint`` restrict the hosts.
    Raises ValueError for a malformed quantity or host list."""
    shape = resolve_shape(job, plan, options)
    nodes = shape.nodes
    cpu = (shape.cpu_millis_per_node if shape.cpu_millis_per_node is not None
           else (shape.ranks_per_node or 1) * 1000)
    mem = shape.mem_per_node_mb or 0
    gpus = shape.gpus_per_node or 0
    excluded = frozenset(expand(options.exclude)) if options.exclude else (
        frozenset())
    return PlacementRequest(count=nodes, cpu_millis=cpu, memory_mb=mem, gpus=gpus,
                            exclusive=options.exclusive, partition=options.partition,
                            features=features_of(options.constraint) or frozenset(),
                            excluded=excluded)
