"""A TrainJob as a placement request: what :func:`bridge.placement.tree_best_fit` places.

:func:`request_from_job` reads the TrainJob's ``resourcesPerNode``, its launch plan and
its scheduling options (the Slurm options ``tbatch`` and the scheduling annotation
carry) and returns a :class:`bridge.placement.PlacementRequest`; :func:`features_of`
says which ``--constraint`` values the bridge can evaluate. Pure; malformed quantities
or host lists raise ValueError (the engine then leaves the choice to the back end).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import hostlist

from bridge.model import TrainJob
from bridge.placement import PlacementRequest
from bridge.runtimes import Framework, LaunchPlan
from bridge.scheduling import SchedulingOptions
from bridge.topology import cpu_millis, memory_mb

__all__ = ["features_of", "request_from_job"]

_SIMPLE_FEATURES = re.compile(r"^[A-Za-z0-9_.:-]+(?:[&,][A-Za-z0-9_.:-]+)*$")


def features_of(constraint: str | None) -> frozenset[str] | None:
    """The features a Slurm ``--constraint`` requires, when it is a plain conjunction
    (``ib``, ``ib&v100``); ``None`` when it is anything else (``a|b``, counts,
    brackets), which the bridge does not evaluate."""
    if not constraint:
        return frozenset()
    if not _SIMPLE_FEATURES.match(constraint):
        return None
    return frozenset(re.split(r"[&,]", constraint))


def request_from_job(job: TrainJob, plan: LaunchPlan,
                     options: SchedulingOptions) -> PlacementRequest:
    """The placement request of a TrainJob: ``plan.num_nodes`` nodes, each needing
    ``resourcesPerNode.requests`` (cpu, memory, ``nvidia.com/gpu``) when given, else
    what the Slurm options ask per node (tasks per node x CPUs per task, ``--mem``,
    ``--gpus-per-node``; one CPU by default). Partition, ``--exclusive``,
    ``--exclude`` and a plain-conjunction ``--constraint`` restrict the hosts.
    Raises ValueError for a malformed quantity or host list."""
    nodes = plan.num_nodes
    trainer = job.spec.trainer
    requests: Mapping[str, str | int | float] = {}
    if trainer and trainer.resources_per_node and trainer.resources_per_node.requests:
        requests = trainer.resources_per_node.requests
    if options.ntasks_per_node is not None:
        tasks = options.ntasks_per_node
    elif options.ntasks is not None:
        tasks = math.ceil(options.ntasks / nodes)
    elif plan.framework is not Framework.PLAIN and plan.proc_per_node:
        tasks = plan.proc_per_node
    else:
        tasks = 1
    cpu = (cpu_millis(requests["cpu"]) if "cpu" in requests
           else tasks * (options.cpus_per_task or 1) * 1000)
    mem = (memory_mb(requests["memory"]) if "memory" in requests
           else options.mem_per_node_mb or 0)
    gpus = (math.ceil(float(requests["nvidia.com/gpu"])) if "nvidia.com/gpu" in requests
            else options.gpus_per_node or 0)
    excluded = frozenset(hostlist.expand_hostlist(options.exclude)) if options.exclude else (
        frozenset())
    return PlacementRequest(count=nodes, cpu_millis=cpu, memory_mb=mem, gpus=gpus,
                            exclusive=options.exclusive, partition=options.partition,
                            features=features_of(options.constraint) or frozenset(),
                            excluded=excluded)

