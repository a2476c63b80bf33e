"""A node pod's resources and processes, as Trainer decides them (pure).

:func:`container_resources` is the trainer container's ``resources``: the job's
``resourcesPerNode`` (else its runtime trainer's, as Trainer takes them) with what an
explicit scheduling option set; :func:`torch_nproc_per_node` is ``PET_NPROC_PER_NODE``
(k8s_adapter/trainer_layout.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.backend import SubmitRequest
from bridge.runtime_steps import given_resources
from bridge.shape import GPU_RESOURCE
from k8s_adapter import trainer_layout

__all__ = ["container_resources", "torch_nproc_per_node"]


def _quantities(values: Mapping[str, Any] | None) -> dict[str, str]:
    return {k: str(v) for k, v in (values or {}).items()}


def container_resources(request: SubmitRequest) -> dict[str, dict[str, str]]:
    """A node pod's ``resources``: ``resourcesPerNode`` as the user wrote it, except
    for what an explicit scheduling option set (the job shape's precedence,
    :mod:`bridge.shape`): CPUs per node, ``<MiB>Mi`` and GPUs from the shape, in
    ``requests`` and, where the user gave a limit (always, for GPUs), in ``limits``;
    ``--tmp`` as the ``ephemeral-storage`` request."""
    shape = request.job_shape
    given = given_resources(request.job, request.plan.resources)
    requests = _quantities(given.get("requests"))
    limits = _quantities(given.get("limits"))
    values = {"cpu": shape.cpus_per_node, "memory": (
        f"{shape.mem_per_node_mb}Mi" if shape.mem_per_node_mb is not None else None),
        GPU_RESOURCE: shape.gpus_per_node}
    for key in sorted(shape.from_options):
        value = values[key]
        if value is None:
            continue
        requests[key] = str(value)
        if key in limits or key == GPU_RESOURCE:
            limits[key] = str(value)
    if request.options.tmp_mb:  # --tmp: local disk per node (0: no minimum)
        requests["ephemeral-storage"] = f"{request.options.tmp_mb}Mi"
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def torch_nproc_per_node(request: SubmitRequest) -> str:
    """``PET_NPROC_PER_NODE``: an explicit ``--ntasks-per-node`` / ``--ntasks`` as the
    number; else the TrainJob's ``numProcPerNode`` (else the runtime's, else ``auto``)
    resolved as Trainer does (:func:`k8s_adapter.trainer_layout.torch_nproc_per_node`)
    against the resources the container gets."""
    options = request.options
    if options.ntasks_per_node is not None or options.ntasks is not None:
        return str(request.job_shape.ranks_per_node or 1)
    trainer = request.job.spec.trainer
    value: int | str = "auto"
    if trainer is not None and trainer.num_proc_per_node is not None:
        value = trainer.num_proc_per_node
    elif request.plan.proc_per_node is not None:
        value = request.plan.proc_per_node
    return trainer_layout.torch_nproc_per_node(value, container_resources(request))
