"""The bridge's placement handed to Kueue's Topology Aware Scheduling (TAS).

On a TrainJob that Kueue queues the bridge pins no node affinity (k8s_adapter/kueue.py,
:func:`~k8s_adapter.kueue.managed`): Kueue's flavor, and its TAS, choose the nodes.
What the bridge's placement would ask of them, the job's ``switches`` option (sbatch's
``--switches=COUNT[@MAX_TIME]``: all nodes under at most COUNT leaf switches), is
handed to Kueue instead, as Kueue's own annotation on the trainer's pod template
(``replicatedJobs`` ``node``; an MPI job's ``launcher`` too, both in one pod-set group,
so that Kueue fits every rank in one domain), in a ``spec.runtimePatches`` entry of
manager :data:`PATCH_MANAGER`. A job of one node asks for nothing (it is always under
one switch).

* ``switches=1`` without a wait: ``kueue.x-k8s.io/podset-required-topology`` at the
  back end's lowest topology level (its ``topology_labels``, the host level dropped:
  the level of its leaf switches). Kueue admits the job only where all its pods fit in
  one domain of that level, as Slurm starts it only under one switch.
* ``switches`` above 1, or with a wait (``@MAX_TIME``: Slurm runs the job anyway once
  it has waited that long): ``podset-preferred-topology`` at that level. Kueue packs
  the pods into as few domains as it can, and admits the job anyway; Kueue has no
  "at most N domains" nor a time limit on a requirement.
* No ``switches``: nothing; Kueue's flavor decides, as without the bridge.

Kueue builds a TrainJob's Workload from the TrainJob when it is created and, with
quota free, admits it at once; it never rebuilds it for a changed annotation (Kueue
v0.17 compares pod counts and pod specs only). So the entry is added when the TrainJob
is created, by the door's mutating admission webhook
(:mod:`k8s_adapter.topology_webhook`). A queued TrainJob that asks for switches and
reaches the bridge without the entry (no webhook registered, or it did not answer) is
refused at admission, naming the option and the webhook: the request is never dropped
without a word. A TAS annotation the TrainJob's own patches carry, or its runtime's
template, wins: no entry is added, and ``--switches`` beside it is refused.

Contract: pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from bridge.scheduling import SchedulingOptions
from k8s_adapter.podsecurity import dig

__all__ = ["PATCH_MANAGER", "PREFERRED", "REQUIRED", "TAS_ANNOTATIONS", "asks_topology",
           "entry_for", "handed", "leaf_level", "pod_sets", "request_for"]

#: The ``manager`` of the bridge's ``spec.runtimePatches`` entry.
PATCH_MANAGER = "hpc-bridge.io/placement"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
#: Kueue's annotations that ask for a topology (any one of them: the job asked itself).
TAS_ANNOTATIONS = (REQUIRED, PREFERRED, "kueue.x-k8s.io/podset-unconstrained-topology",
                   "kueue.x-k8s.io/podset-slice-required-topology")
#: The replicated job whose pods the bridge's placement places (the trainer's).
TRAINER_JOB = "node"
#: Kueue's pod-set group: pod sets placed in one topology domain together.
GROUP = "kueue.x-k8s.io/podset-group-name"
GROUP_NAME = "hpc-bridge-ranks"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def leaf_level(topology_labels: Sequence[str]) -> str | None:
    """The label key of the lowest switch level (the host level dropped), or None."""
    keys = [k for k in topology_labels if k]
    if keys and keys[-1] == HOSTNAME_LABEL:
        keys.pop()
    return keys[-1] if keys else None


def request_for(options: SchedulingOptions, topology_labels: Sequence[str]
                ) -> tuple[str, str] | None:
    """(annotation, level) that stands for ``options``' switch request (module
    docstring), or None when there is nothing to hand over."""
    level = leaf_level(topology_labels)
    if options.switches is None or level is None:
        return None
    if options.switches == 1 and not options.switches_wait_minutes:
        return REQUIRED, level
    return PREFERRED, level


def asks_topology(patches: Any) -> bool:
    """Whether any pod template in ``patches`` (``spec.runtimePatches``) carries one of
    Kueue's TAS annotations."""
    for patch in patches if isinstance(patches, list) else []:
        jobs = dig(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        for rjob in jobs if isinstance(jobs, list) else []:
            annotations = dig(rjob, "template", "spec", "template", "metadata", "annotations")
            if isinstance(annotations, Mapping) and any(a in annotations
                                                        for a in TAS_ANNOTATIONS):
                return True
    return False


def pod_sets(framework: str, num_nodes: int) -> tuple[str, ...]:
    """The replicated jobs whose pods the request is for: none for one node (always
    under one switch), the launcher and the workers of an MPI job (one group: Kueue
    fits them in one domain together), else the trainer's ``node``."""
    if num_nodes <= 1:
        return ()
    return ("launcher", TRAINER_JOB) if framework == "mpi" else (TRAINER_JOB,)


def entry_for(obj: Mapping[str, Any], request: tuple[str, str] | None,
              jobs: Sequence[str] = (TRAINER_JOB,), runtime_asks: bool = False
              ) -> list[dict[str, Any]] | None:
    """The TrainJob ``obj``'s ``spec.runtimePatches`` with the bridge's entry for
    ``request`` on the replicated ``jobs`` added, or None when nothing is to be added:
    no request or no jobs, patches that are no list, the entry is there, or the job
    (``runtime_asks``: its runtime) asks for a topology itself."""
    spec = obj.get("spec")
    if request is None or not jobs or not isinstance(spec, Mapping):
        return None
    patches = spec.get("runtimePatches", [])
    if not isinstance(patches, list) or runtime_asks or asks_topology(patches) or any(
            isinstance(p, Mapping) and p.get("manager") == PATCH_MANAGER for p in patches):
        return None
    annotation, level = request
    annotations = {annotation: level}
    if len(jobs) > 1:
        annotations[GROUP] = GROUP_NAME
    return [*copy.deepcopy(patches), {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [{"name": name, "template": {
            "spec": {"template": {"metadata": {"annotations": dict(annotations)}}}}}
            for name in jobs]}}}}]


def handed(patches: Any) -> bool:
    """Whether ``patches`` (``spec.runtimePatches``) carry the bridge's entry, asking
    Kueue for a topology."""
    return asks_topology([p for p in (patches if isinstance(patches, list) else [])
                          if isinstance(p, Mapping) and p.get("manager") == PATCH_MANAGER])
