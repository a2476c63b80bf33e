"""The runtime's JobSet template under the bridge's JobSet, as Trainer keeps it (pure).

Kubeflow Trainer builds a TrainJob's JobSet *from* its runtime's ``spec.template`` and
changes only what the TrainJob decides. The bridge lays out its own JobSet
(k8s_adapter/jobset.py) and then, with :func:`graft`, keeps what the template says
beyond that layout, before the job's own patches are merged:

* each replicated job the template shares with the bridge's (by name) gets the
  template's ``dependsOn`` (the items naming one laid out before it: JobSet refuses
  others), and its pod spec is the template's with the bridge's laid over it: maps
  merge, named lists (containers, volumes, volumeMounts …) merge by name, ``env`` items
  replace by name; the bridge's values win. In the trainer's replicated job a
  container's ``command`` and ``args`` are the job's, never the template's (the
  runtime's command is already the job's where the job has none: bridge/runtimes.py);
  elsewhere (an MPI job's ``node`` pods) a template container's command and args stay,
  as in Trainer, instead of the bridge's ``sshd -De``. The shared replicated jobs keep
  the template's order, after the steps and the bridge's own (the data cache);
* the template's initializer steps (``dataset-initializer``, ``model-initializer``:
  bridge/runtime_steps.py; those the plan lists) are added as they are, in the
  template's order, first, as one Job of the template's ``parallelism`` (else 1),
  with what Trainer's ``Initializer()`` sets from ``spec.initializer``: ``STORAGE_URI``
  and the ``env`` items upserted on the step's container (named like the step), the
  ``secretRef`` as its ``envFrom``; the JobSet succeeds when they and the trainer have
  (Trainer's: all its replicated jobs);
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
from bridge.runtime_steps import ANCESTOR_LABEL, STEP_CONTAINERS, TRAINER_STEP, sub_mapping
from k8s_adapter.jobset_merge import merge

__all__ = ["graft"]

STORAGE_URI = "STORAGE_URI"
#: Fields of a container that are the bridge's alone (see the module docstring).
_OWN_CONTAINER_FIELDS = ("command", "args")
#: JobSet spec fields of the template kept when the bridge's JobSet has none.
_KEPT_JOBSET_FIELDS = ("volumeClaimPolicies", "startupPolicy")
#: What a volume claim template may say (JobSet's controller creates the claim as
#: itself: no ``volumeName``, ``selector`` or ``dataSource`` reaching another volume).
_CLAIM_SPEC_FIELDS = frozenset({"accessModes", "resources", "storageClassName",
                                "volumeMode"})
_CLAIM_META_FIELDS = frozenset({"name", "labels", "annotations"})
#: The longest pod name a Job may give (a hostname label), and its random suffix.
_MAX_POD_NAME, _POD_SUFFIX = 63, len("-abcde")


def _spec(obj: Any) -> Mapping[str, Any]:
    return sub_mapping(obj, "spec")


def _pod(rjob: Mapping[str, Any]) -> Mapping[str, Any]:
    return _spec(_spec(rjob.get("template")).get("template"))


def _upsert(env: list[dict[str, Any]], name: str, value: str) -> None:
    for item in env:
        if isinstance(item, dict) and item.get("name") == name:
            item.clear()
            item.update(name=name, value=value)
            return
    env.append({"name": name, "value": value})


def _step_of(rjob: Mapping[str, Any]) -> Any:
    return sub_mapping(sub_mapping(rjob.get("template"), "metadata"), "labels").get(ANCESTOR_LABEL)


def _initializer(rjob: Mapping[str, Any], step: str, job: TrainJob,
                 pod_defaults: Mapping[str, Any] | None) -> dict[str, Any]:
    """An initializer step of the template, as Trainer's ``Initializer()`` sets it, with
    the back end's ``pod_defaults``."""
    out: dict[str, Any] = copy.deepcopy(dict(rjob))
    level: Any = out
    for key in ("template", "spec", "template", "spec"):
        level = level.setdefault(key, {}) if isinstance(level, dict) else None
    if not isinstance(level, dict):
        raise BackendRejected(f"spec.runtimeRef.name: the runtime's {step} replicated job: "
                              f"template.spec.template.spec must be a mapping")
    level.update(pod_defaults or {})
    out["replicas"] = 1  # Trainer's: one Job; its pods the template's parallelism, else 1
    job_spec = out.setdefault("template", {}).setdefault("spec", {})
    count = job_spec.get("parallelism")
    count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1
    job_spec.update(parallelism=count, completions=count)
    job_spec.setdefault("completionMode", "Indexed")
    init = job.spec.initializer if isinstance(job.spec.initializer, Mapping) else {}
    entry = init.get(STEP_CONTAINERS[step])
    if not isinstance(entry, Mapping):
        return out
    containers = level.get("containers")
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, dict) or container.get("name") != step:
            continue
        env = container.setdefault("env", [])
        if not isinstance(env, list):
            raise BackendRejected(f"spec.runtimeRef.name: the runtime's {step} container's "
                                  f"env must be a list")
        if entry.get("storageUri") is not None:
            _upsert(env, STORAGE_URI, str(entry["storageUri"]))
        for item in entry.get("env") or []:
            _upsert(env, str(item["name"]), str(item.get("value", "")))
        if entry.get("secretRef"):
            container.setdefault("envFrom", []).append(
                {"secretRef": {"name": entry["secretRef"]["name"]}})
    return out


def _lay_over(template_pod: Mapping[str, Any], ours: dict[str, Any], trainer: bool) -> None:
    """``ours`` (a pod spec) becomes the template's with ours merged over it. In the
    trainer's replicated job (``trainer``) a container's ``command``/``args`` are ours;
    elsewhere (an MPI job's ``node`` pods) a template container that has a command keeps
    it with its args, as Trainer keeps them."""
    base = copy.deepcopy(dict(template_pod))
    mine = {c.get("name"): c for c in ours.get("containers") or [] if isinstance(c, dict)}
    containers = base.get("containers")
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, dict) or container.get("name") not in mine:
            continue
        if trainer or container.get("command") is None:
            for key in _OWN_CONTAINER_FIELDS:
                container.pop(key, None)
        else:
            for key in _OWN_CONTAINER_FIELDS:
                mine[container["name"]].pop(key, None)
    merged = merge(base, ours)
    ours.clear()
    ours.update(merged)


def _depends_on(items: Any, earlier: Collection[str]) -> list[dict[str, Any]]:
    """The template's ``dependsOn`` items that name a replicated job laid out before
    (JobSet refuses any other: a one-node MPI job has no ``node`` to wait for)."""
    return [copy.deepcopy(dict(d)) for d in items if isinstance(d, Mapping)
            and d.get("name") in earlier] if isinstance(items, list) else []


def graft(body: dict[str, Any], template: Any, job: TrainJob, laid_out: Collection[str],
          trainer_rjob: str, steps: Collection[str],
          pod_defaults: Mapping[str, Any] | None = None) -> None:
    """In place: ``template`` (the runtime's ``spec.template``) under ``body`` (the
    bridge's JobSet), as the module docstring says. ``laid_out``: the names of replicated
    jobs the bridge makes for some job (a template's one absent from ``body`` is left
    out); ``trainer_rjob``: the bridge's for the template's trainer step; ``steps``:
    the plan's initializer steps (a job stored before they were read runs without);
    ``pod_defaults``: pod fields the back end sets on every pod (its service account,
    its scheduler), which the steps' pods get too."""
    tspec = _spec(template)
    trjobs = tspec.get("replicatedJobs")
    if not isinstance(trjobs, list) or not trjobs:
        return
    spec = body["spec"]
    ours = {rj["name"]: rj for rj in spec["replicatedJobs"]}
    added: list[dict[str, Any]] = []
    shared: list[tuple[dict[str, Any], Any]] = []
    for trj in trjobs:
        if not isinstance(trj, Mapping):
            continue
        name = trj.get("name")
        meta = sub_mapping(trj.get("template"), "metadata")
        step = sub_mapping(meta, "labels").get(ANCESTOR_LABEL)
        rj = ours.get(name) if isinstance(name, str) else None
        if rj is None and step == TRAINER_STEP:
            rj = ours.get(trainer_rjob)
        if rj is not None and all(rj is not r for r, _ in shared):
            _lay_over(_pod(trj), rj["template"]["spec"]["template"]["spec"],
                      rj["name"] == trainer_rjob)
            shared.append((rj, trj.get("dependsOn")))
        elif isinstance(step, str) and step in STEP_CONTAINERS:
            if any(_step_of(a) == step for a in added):
                raise BackendRejected(f"spec.runtimeRef.name: the runtime has more than "
                                      f"one {step} replicated job")
            if step in steps:
                _check_step_name(body["metadata"]["name"], step)
                added.append(_initializer(trj, step, job, pod_defaults))
        elif name not in laid_out:  # one the bridge lays out, not for this job: skipped
            raise BackendRejected(
                f"spec.runtimeRef.name: the runtime's replicated job {name!r} is neither "
                f"an initializer step ({', '.join(STEP_CONTAINERS)}) nor one the bridge "
                f"lays out ({', '.join(ours)}): the bridge does not know how to run it")
    # The steps first, then the bridge's own (the data cache), then the shared ones in
    # the template's order, each waiting only for one laid out before it.
    in_template = {id(rj) for rj, _ in shared}
    order = [*added, *(rj for rj in spec["replicatedJobs"] if id(rj) not in in_template)]
    for rj, depends in shared:
        if depends and not rj.get("dependsOn"):
            kept = _depends_on(depends, {r["name"] for r in order})
            if kept:
                rj["dependsOn"] = kept
        order.append(rj)
    spec["replicatedJobs"] = order
    if added:
        # Trainer's JobSet succeeds when all its replicated jobs do: the steps too.
        success = spec.get("successPolicy")
        if isinstance(success, dict) and success.get("targetReplicatedJobs"):
            success["targetReplicatedJobs"] = [*(rj["name"] for rj in added),
                                               *success["targetReplicatedJobs"]]
    for key in _KEPT_JOBSET_FIELDS:
        if tspec.get(key) is not None and key not in spec:
            spec[key] = copy.deepcopy(tspec[key])
    _check_claims(spec.get("volumeClaimPolicies"))


def _check_claims(policies: Any) -> None:
    """Refuse (:class:`BackendRejected`) volume claim policies beyond what a job's own
    scratch volume needs: templates with a name and ``accessModes``, ``resources``,
    ``storageClassName``, ``volumeMode``, deleted with the JobSet (a retained claim
    would be mounted by the next job of that name)."""
    where = "spec.runtimeRef.name: the runtime's spec.template.spec.volumeClaimPolicies"
    if policies is None:
        return
    if not isinstance(policies, list):
        raise BackendRejected(f"{where}: must be a list")
    for i, policy in enumerate(policies):
        if not isinstance(policy, Mapping) or set(policy) - {"templates", "retentionPolicy"}:
            raise BackendRejected(f"{where}[{i}]: only templates and retentionPolicy")
        retention = policy.get("retentionPolicy")
        if retention is not None and (not isinstance(retention, Mapping) or any(
                v != "Delete" for v in retention.values())):
            raise BackendRejected(f"{where}[{i}].retentionPolicy: only Delete (a claim "
                                  f"kept after its job would be mounted by the next)")
        templates = policy.get("templates")
        for j, claim in enumerate(templates if isinstance(templates, list) else [None]):
            meta, spec = sub_mapping(claim, "metadata"), sub_mapping(claim, "spec")
            extra = (set(claim) - {"metadata", "spec", "status"} if isinstance(claim, Mapping)
                     else {"?"}) | (set(meta) - _CLAIM_META_FIELDS) | (
                         set(spec) - _CLAIM_SPEC_FIELDS)
            if extra or not isinstance(meta.get("name"), str):
                raise BackendRejected(
                    f"{where}[{i}].templates[{j}]: a claim template has a metadata.name and "
                    f"only {', '.join(sorted(_CLAIM_SPEC_FIELDS))} in its spec, not "
                    f"{', '.join(sorted(extra)) or 'no name'}")


def _check_step_name(jobset: str, step: str) -> None:
    """Refuse a JobSet name too long for the pods of ``step`` (JobSet would refuse it)."""
    longest = _MAX_POD_NAME - _POD_SUFFIX - len(f"-{step}-0-0")
    if len(jobset) > longest:
        raise BackendRejected(f"metadata.name: {jobset!r} is too long for the runtime's "
                              f"{step} step's pods: at most {longest} characters")
