"""What the shared pool changes in a job's JobSet, and how its pods are pinned.

At creation (:func:`amend`) the JobSet is made *suspended* (no pod exists until Slurm
starts the holder), every pod template tolerates the pool's taint and carries the
pool's node label as a node selector, and the training pods ("node") of one JobSet
repel each other per host (one pod per allocated node). Its annotations name the back
end and the uid its holder must belong to. A Job deadline the time limit gave is
dropped: the holder's time limit ends the job, on Slurm's one clock (a shorter deadline
a runtime patch set stays).

Pinning (:func:`pin_patch`): when the holder runs, each of its nodes gets the label
``slurm.hpc-bridge.io/job-<id>`` (:func:`allocation_label`) and every pod template's
node selector requires it; the JobSet is unsuspended in the same update. The label's
value is the JobSet's namespace, so that an admission policy can let a pod that
tolerates the pool's taint in only when it is pinned to an allocation of its own
namespace (charts/hpc-bridge/templates/slurm-pool-policy.yaml). JobSet lets a
suspended JobSet's pod templates change their node selector (as Kueue does), not their
affinity, hence the label rather than a host list. A node may hold several allocations
(Slurm may share it): one label per allocation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.backend import SubmitRequest
from k8s_adapter.jobset import NODE

LABEL_PREFIX = "slurm.hpc-bridge.io/job-"
#: Annotations on the JobSet: the back end that made it, the uid its holder runs as.
ANN_POOL = "slurm.hpc-bridge.io/pool"
ANN_OWNER_UID = "slurm.hpc-bridge.io/owner-uid"
HOST_LABEL = "kubernetes.io/hostname"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def allocation_label(slurm_job_id: str) -> str:
    """The node label of Slurm job ``slurm_job_id``'s allocation."""
    if not (slurm_job_id.isascii() and slurm_job_id.isdigit()):
        raise ValueError(f"not a Slurm job id: {slurm_job_id!r}")
    return LABEL_PREFIX + slurm_job_id


def pod_specs(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(replicatedJob name, pod spec) of every pod template of a JobSet."""
    return [(rj["name"], rj["template"]["spec"]["template"].setdefault("spec", {}))
            for rj in body["spec"]["replicatedJobs"]]


def amend(body: dict[str, Any], request: SubmitRequest, *, pool: str, taint_key: str,
          pool_label: str | None) -> None:
    """Make a rendered JobSet the pool's (see the module docstring). The toleration
    and the anti-affinity are appended to what the runtime or the user set."""
    body["spec"]["suspend"] = True
    meta = body["metadata"]
    meta.setdefault("annotations", {}).update(
        {ANN_POOL: pool, ANN_OWNER_UID: str(request.owner.uid)})
    name = meta["name"]
    limit = request.options.time_limit_minutes or request.job_shape.time_limit_minutes
    for rj in body["spec"]["replicatedJobs"]:
        job_spec = rj["template"]["spec"]
        deadline = job_spec.get("activeDeadlineSeconds")
        if limit and isinstance(deadline, int) and deadline >= limit * 60:
            del job_spec["activeDeadlineSeconds"]  # the holder's limit ends the job: one clock
    for rjob, spec in pod_specs(body):
        spec.setdefault("tolerations", []).append(
            {"key": taint_key, "operator": "Exists", "effect": "NoSchedule"})
        if pool_label:
            spec.setdefault("nodeSelector", {})[pool_label] = "true"
        if rjob == NODE:
            anti = spec.setdefault("affinity", {}).setdefault("podAntiAffinity", {})
            anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
                {"labelSelector": {"matchLabels": {JOBSET_NAME_LABEL: name,
                                                   RJOB_NAME_LABEL: NODE}},
                 "topologyKey": HOST_LABEL})


def pinned_to(obj: Mapping[str, Any]) -> str | None:
    """The Slurm job id the JobSet's pods are pinned to (the node-selector label of its
    first pod template), or None."""
    try:
        selector = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
            "spec"].get("nodeSelector") or {}
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    ids = [k.removeprefix(LABEL_PREFIX) for k in selector if k.startswith(LABEL_PREFIX)]
    return ids[0] if len(ids) == 1 else None


def pin_patch(obj: Mapping[str, Any], slurm_job_id: str | None, *, suspend: bool
              ) -> list[dict[str, Any]]:
    """A JSON patch that sets every pod template's node selector to require the label of
    ``slurm_job_id``'s allocation (its value: the JobSet's namespace; None: no
    allocation's, for unpinning), other keys
    kept, and ``spec.suspend``. Guarded by the JobSet's ``resourceVersion`` (a ``test``
    operation): a patch of a JobSet changed meanwhile fails and is redone."""
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": obj["metadata"]["resourceVersion"]}]
    for i, rj in enumerate(obj["spec"]["replicatedJobs"]):
        spec = rj["template"]["spec"]["template"].get("spec") or {}
        selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items()
                    if not k.startswith(LABEL_PREFIX)}
        if slurm_job_id is not None:
            selector[allocation_label(slurm_job_id)] = obj["metadata"]["namespace"]
        ops.append({"op": "add",
                    "path": f"/spec/replicatedJobs/{i}/template/spec/template/spec/nodeSelector",
                    "value": selector})
    ops.append({"op": "add", "path": "/spec/suspend", "value": suspend})
    return ops
