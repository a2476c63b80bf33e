"""The parts of a JobSet's layout that Kubeflow Trainer's controller decides (pure).

Facts from Trainer's source (v2.3 line, ``pkg/constants/constants.go``,
``pkg/runtime/framework/plugins/{torch,mpi,jobset}``) and JobSet's defaulting webhook
(``sigs.k8s.io/jobset`` ``pkg/webhooks/jobset_webhook.go``), restated, not copied:

* the trainer port is 29500 (``ContainerTrainerPort``): ``PET_MASTER_PORT`` and the
  ``node`` container's only declared port (``containerPort: 29500``, no name);
* ``PET_NPROC_PER_NODE`` is resolved by :func:`torch_nproc_per_node`;
* Trainer's JobSet plugin sets no pod ``restartPolicy``, no Job ``backoffLimit`` and
  no JobSet ``failurePolicy``: what the runtime's template says stands, else JobSet
  defaults ``restartPolicy`` to ``OnFailure``, Kubernetes defaults ``backoffLimit``
  to 6, and with no ``failurePolicy`` the first failed Job fails the JobSet (no
  restarts of the whole set) -- :func:`restart_policy` / :func:`job_spec_defaults`;
* for OpenMPI the launcher gets ``OMPI_MCA_orte_set_default_slots`` (the slots per
  node) and ``OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10``
  (:func:`openmpi_env`) besides the hostfile variables :mod:`mpi_launch.hostfile` gives.

The runtime's JobSet template reaches the renderer as ``LaunchPlan.extra["template"]``
(:data:`TEMPLATE_KEY`: the runtime's ``spec.template``, Trainer's
``JobSetTemplateSpec``); a plan without one gets the defaults above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.runtime_steps import cpu_count, gpu_count

#: Trainer's ``ContainerTrainerPort``: torch master port and the node container's port.
TRAINER_PORT = 29500
#: The downward-API field of a pod's completion index in an Indexed Job.
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
#: Where a :class:`bridge.runtimes.LaunchPlan` carries its runtime's ``spec.template``.
TEMPLATE_KEY = "template"
#: JobSet's webhook default for a pod template that names no ``restartPolicy``.
DEFAULT_RESTART_POLICY = "OnFailure"
#: What Trainer sets in ``OMPI_MCA_plm_rsh_args``.
OPENMPI_RSH_ARGS = "-o ConnectionAttempts=10"


def torch_nproc_per_node(value: int | str, resources: Mapping[str, Any] | None) -> str:
    """``PET_NPROC_PER_NODE`` as Trainer v2.3's torch plugin resolves it
    (``EnforceMLPolicy``): ``value`` is the TrainJob's ``numProcPerNode`` (else, a
    bridge extension, the runtime's), else ``auto``; ``resources`` the pod's
    (``requests``/``limits``).

    * ``auto``: stays ``auto`` (torchrun counts the GPUs) when the requests, else the
      limits, ask for a GPU (a resource whose name contains ``gpu``, more than 0);
      else the CPU count (the requests' ``cpu`` unless absent or 0, else the limits'),
      at least 1 -- so 1 without any resources;
    * ``cpu`` (a bridge extension: Trainer v2.3 takes numbers only): the CPU count, at
      least 1; without any resources it stays ``cpu`` for torchrun to count;
    * a number or ``gpu``: kept.
    """
    mode = str(value)
    if mode == "auto" and gpu_count(resources) > 0:
        return mode
    if mode == "auto" or (mode == "cpu" and resources):
        return str(max(1, cpu_count(resources)))
    return mode


def replicated_job_template(template: Mapping[str, Any] | None,
                            name: str) -> Mapping[str, Any]:
    """The Job template (``replicatedJobs[name].template``) of a runtime's ``spec.template``
    (empty when the runtime has none or no such replicated job)."""
    spec = (template or {}).get("spec") if isinstance(template, Mapping) else None
    for rj in (spec or {}).get("replicatedJobs") or [] if isinstance(spec, Mapping) else []:
        if isinstance(rj, Mapping) and rj.get("name") == name:
            found = rj.get("template")
            return found if isinstance(found, Mapping) else {}
    return {}


def restart_policy(template: Mapping[str, Any] | None, name: str,
                   batch: bool = False) -> str:
    """The pod ``restartPolicy`` of replicated job ``name``: ``Never`` for a batch
    script (``batch``: sbatch's semantics, a failed script is not run again), else the
    runtime template's, else JobSet's default (``OnFailure``)."""
    if batch:
        return "Never"
    pod_spec = ((replicated_job_template(template, name).get("spec") or {})
                .get("template") or {}).get("spec") or {}
    value = pod_spec.get("restartPolicy") if isinstance(pod_spec, Mapping) else None
    return str(value) if isinstance(value, str) and value else DEFAULT_RESTART_POLICY


def job_spec_defaults(template: Mapping[str, Any] | None, name: str,
                      batch: bool = False) -> dict[str, Any]:
    """Job-level fields of replicated job ``name`` the runtime template sets and Trainer
    keeps (``backoffLimit``, ``backoffLimitPerIndex``, ``maxFailedIndexes``,
    ``podFailurePolicy``); none when it sets none (Kubernetes' ``backoffLimit`` 6);
    ``backoffLimit: 0`` for a batch script (``batch``: no retries, as sbatch)."""
    if batch:
        return {"backoffLimit": 0}
    spec = replicated_job_template(template, name).get("spec") or {}
    keys = ("backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes", "podFailurePolicy")
    return {k: spec[k] for k in keys if isinstance(spec, Mapping) and spec.get(k) is not None}


def jobset_spec_defaults(template: Mapping[str, Any] | None,
                         batch: bool = False) -> dict[str, Any]:
    """JobSet-level fields the runtime template sets and Trainer keeps as they are
    (``failurePolicy``); none when it sets none (no restarts of the set), nor for a
    batch script (``batch``: never run again)."""
    if batch:
        return {}
    spec = (template or {}).get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping) or spec.get("failurePolicy") is None:
        return {}
    return {"failurePolicy": spec["failurePolicy"]}


def openmpi_env(slots: int) -> dict[str, str]:
    """The OpenMPI variables Trainer's MPI plugin adds beyond the hostfile's."""
    return {"OMPI_MCA_orte_set_default_slots": str(slots),
            "OMPI_MCA_plm_rsh_args": OPENMPI_RSH_ARGS}
