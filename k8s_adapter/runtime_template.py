"""The runtime's JobSet template under the bridge's JobSet, as Trainer keeps it (pure).

Kubeflow Trainer builds a TrainJob's JobSet *from* its runtime's ``spec.template`` and
changes only what the TrainJob decides. The bridge lays out its own JobSet
(k8s_adapter/jobset.py) and then, with :func:`graft`, keeps what the template says
beyond that layout, before the job's own patches are merged:

* each replicated job the template shares with the bridge's (by name) gets the
  template's ``dependsOn``, and its pod spec is the template's with the bridge's laid
  over it: maps merge, named lists (containers, volumes, volumeMounts, env …) merge by
  name, the bridge's values win. A container's ``command`` and ``args`` are never the
  template's there: the runtime's command is already the job's where the job has none
  (bridge/runtimes.py), and the bridge's ``node`` pods of an MPI job run ``sshd``;
* the template's initializer steps (``dataset-initializer``, ``model-initializer``:
  bridge/runtime_steps.py) are added as they are, in the template's order before the
  trainer's, with one pod (``replicas``, ``parallelism``, ``completions`` 1) and what
  Trainer's ``Initializer()`` sets from ``spec.initializer``: ``STORAGE_URI`` and the
  ``env`` items upserted on the step's container (named like the step), the
  ``secretRef`` as its ``envFrom``; the JobSet
  succeeds when they and the trainer have (Trainer's: all its replicated jobs);
* the JobSet's ``volumeClaimPolicies`` (the volume the steps hand to the trainer) and
  ``startupPolicy``.

A template replicated job that is neither the bridge's nor an initializer step is
refused (:class:`BackendRejected` naming it): running it would be guessing what it is.
The grafted pods go through the same checks as any (k8s_adapter/access.py ``secure``).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from bridge.backend import BackendRejected
from bridge.model import TrainJob
from bridge.runtime_steps import ANCESTOR_LABEL, STEP_CONTAINERS, TRAINER_STEP
from k8s_adapter.jobset_merge import merge

__all__ = ["graft"]

STORAGE_URI = "STORAGE_URI"
#: Fields of a container that are the bridge's alone (see the module docstring).
_OWN_CONTAINER_FIELDS = ("command", "args")
#: JobSet spec fields of the template kept when the bridge's JobSet has none.
_KEPT_JOBSET_FIELDS = ("volumeClaimPolicies", "startupPolicy")


def _mapping(obj: Any, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _spec(obj: Any) -> Mapping[str, Any]:
    return _mapping(obj, "spec")


def _pod(rjob: Mapping[str, Any]) -> Mapping[str, Any]:
    return _spec(_spec(rjob.get("template")).get("template"))


def _upsert(env: list[dict[str, Any]], name: str, value: str) -> None:
    for item in env:
        if item.get("name") == name:
            item.clear()
            item.update(name=name, value=value)
            return
    env.append({"name": name, "value": value})


def _initializer(rjob: Mapping[str, Any], step: str, job: TrainJob) -> dict[str, Any]:
    """An initializer step of the template, as Trainer's ``Initializer()`` sets it."""
    out: dict[str, Any] = copy.deepcopy(dict(rjob))
    out["replicas"] = 1  # one pod: Trainer's pod set of a step counts 1
    job_spec = out.setdefault("template", {}).setdefault("spec", {})
    job_spec.update(parallelism=1, completions=1)
    job_spec.setdefault("completionMode", "Indexed")
    init = job.spec.initializer if isinstance(job.spec.initializer, Mapping) else {}
    entry = init.get(STEP_CONTAINERS[step])
    if not isinstance(entry, Mapping):
        return out
    for container in _pod(out).get("containers") or []:
        if not isinstance(container, dict) or container.get("name") != step:
            continue
        env = container.setdefault("env", [])
        if entry.get("storageUri") is not None:
            _upsert(env, STORAGE_URI, str(entry["storageUri"]))
        for item in entry.get("env") or []:
            _upsert(env, str(item["name"]), str(item.get("value", "")))
        if entry.get("secretRef"):
            container.setdefault("envFrom", []).append(
                {"secretRef": {"name": entry["secretRef"]["name"]}})
    return out


def _lay_over(template_pod: Mapping[str, Any], ours: dict[str, Any]) -> None:
    """``ours`` (a pod spec) becomes the template's with ours merged over it."""
    base = copy.deepcopy(dict(template_pod))
    for container in [*(base.get("containers") or []), *(base.get("initContainers") or [])]:
        if isinstance(container, dict):
            for key in _OWN_CONTAINER_FIELDS:
                container.pop(key, None)
    merged = merge(base, ours)
    ours.clear()
    ours.update(merged)


def graft(body: dict[str, Any], template: Any, job: TrainJob,
          laid_out: Collection[str], trainer_rjob: str) -> None:
    """In place: ``template`` (the runtime's ``spec.template``) under ``body`` (the
    bridge's JobSet), as the module docstring says. ``laid_out``: the names of replicated
    jobs the bridge makes for some job (a template's one absent from ``body`` is left
    out); ``trainer_rjob``: the bridge's for the template's trainer step."""
    tspec = _spec(template)
    trjobs = tspec.get("replicatedJobs")
    if not isinstance(trjobs, list) or not trjobs:
        return
    spec = body["spec"]
    ours = {rj["name"]: rj for rj in spec["replicatedJobs"]}
    added: list[dict[str, Any]] = []
    for trj in trjobs:
        if not isinstance(trj, Mapping):
            continue
        name = trj.get("name")
        meta = _mapping(trj.get("template"), "metadata")
        step = _mapping(meta, "labels").get(ANCESTOR_LABEL)
        rj = ours.get(name) if isinstance(name, str) else None
        if rj is None and step == TRAINER_STEP:
            rj = ours.get(trainer_rjob)
        if rj is not None:
            if trj.get("dependsOn") and not rj.get("dependsOn"):
                rj["dependsOn"] = copy.deepcopy(trj["dependsOn"])
            _lay_over(_pod(trj), rj["template"]["spec"]["template"]["spec"])
        elif step in STEP_CONTAINERS:
            added.append(_initializer(trj, step, job))
        elif name not in laid_out:  # one the bridge lays out, not for this job: skipped
            raise BackendRejected(
                f"spec.runtimeRef.name: the runtime's replicated job {name!r} is neither "
                f"an initializer step ({', '.join(STEP_CONTAINERS)}) nor one the bridge "
                f"lays out ({', '.join(ours)}): the bridge does not know how to run it")
    if added:
        spec["replicatedJobs"] = [*added, *spec["replicatedJobs"]]
        # Trainer's JobSet succeeds when all its replicated jobs do: the steps too.
        success = spec.get("successPolicy")
        if isinstance(success, dict) and success.get("targetReplicatedJobs"):
            success["targetReplicatedJobs"] = [*(rj["name"] for rj in added),
                                               *success["targetReplicatedJobs"]]
    for key in _KEPT_JOBSET_FIELDS:
        if tspec.get(key) is not None and key not in spec:
            spec[key] = copy.deepcopy(tspec[key])
