"""TrainJobs that Kueue queues: its admission, carried into the JobSet (pure).

Kueue (``sigs.k8s.io/kueue``, its ``trainer.kubeflow.org/trainjob`` integration) manages
a TrainJob labelled ``kueue.x-k8s.io/queue-name``: its webhook creates the TrainJob
suspended with a ``spec.runtimePatches`` entry of manager ``kueue.x-k8s.io/manager``;
once the Workload has quota, Kueue writes into that entry what the admission decided for
each replicated job's pods (the flavor's ``nodeSelector`` and ``tolerations``,
Topology Aware Scheduling's ``schedulingGates``, labels and annotations) and then sets
``spec.suspend: false``. Trainer's controller renders the JobSet from the TrainJob again
at that point; the bridge does the same with what matters here:

* The bridge keeps a suspended TrainJob out of its back end, so the first JobSet is laid
  out when Kueue resumes it. Its stored document holds the runtime patches it was
  admitted with, before Kueue's decision: :func:`with_admission` puts the TrainJob's
  current Kueue entry in their place (read from the apiserver at submission).
* A running job that Kueue suspends (preemption, eviction) keeps its JobSet, suspended;
  Kueue empties its entry, and writes a new decision before resuming it.
  :func:`resume_ops` lays that decision over the pod templates as they were laid out
  without any Kueue entry (kept in the JobSet's annotation :data:`ANN_BASE` by
  :func:`record_base`; no patch can set an annotation under the bridge's prefix on a
  JobSet: :func:`k8s_adapter.jobset.render_jobset`), so that the JobSet's templates
  carry no flavor's node selector of the last admission; the fields changed are exactly
  those JobSet lets a suspended JobSet change. (JobSet's controller merges them into the
  Jobs it kept: a key of the last admission that the new one does not set stays on the
  pods, as under Trainer's controller.)
* The bridge's own placement is not pinned as node affinity on such a job
  (:func:`managed`): Kueue chose the nodes' flavor, and its Topology Aware Scheduling the
  nodes (a TrainJob asks for it with Kueue's ``podset-required-topology`` or
  ``podset-preferred-topology`` annotations, in the runtime or in its patches).

Kueue's entry is checked as any patch is (:func:`k8s_adapter.podsecurity.check_patches`,
by the caller): anyone who may update the TrainJob may write it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from bridge.backend import BackendRejected
from bridge.model import KUEUE_PATCH_MANAGER, TrainJob
from k8s_adapter.podsecurity import dig

__all__ = ["ANN_BASE", "PATCH_MANAGER", "QUEUE_LABEL", "managed", "only_jobs",
           "record_base", "resume_ops", "with_admission", "without_kueue"]

#: The label that puts a TrainJob in a Kueue LocalQueue.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The ``manager`` of Kueue's ``spec.runtimePatches`` entry.
PATCH_MANAGER = KUEUE_PATCH_MANAGER
#: JobSet annotation: each replicated job's pod scheduling fields without Kueue's entry.
ANN_BASE = "hpc-bridge.io/kueue-base"
#: The pod template fields Kueue's admission sets and JobSet lets a suspended JobSet
#: change (``metadata`` and ``spec`` keys).
META_FIELDS = ("labels", "annotations")
SPEC_FIELDS = ("nodeSelector", "tolerations", "schedulingGates")


def managed(job: TrainJob) -> bool:
    """Whether Kueue may queue ``job``: it names a LocalQueue, or Kueue's webhook gave it
    an entry (a namespace where Kueue manages jobs without a queue name)."""
    return bool(job.metadata.labels.get(QUEUE_LABEL)) or bool(
        kueue_entries(job.spec.runtime_patches))


def only_jobs(entries: Sequence[Mapping[str, Any]], names: Collection[str]
              ) -> list[dict[str, Any]]:
    """Kueue's entries with only the replicated jobs the bridge's layout has: Trainer's
    runtime code (which Kueue runs) may count one the bridge does not lay out, e.g. the
    ``node`` workers of a one-node MPI job, whose launcher is the only pod."""
    out = []
    for entry in entries:
        kept = copy.deepcopy(dict(entry))
        spec = dig(kept, "trainingRuntimeSpec", "template", "spec")
        if isinstance(spec, dict) and isinstance(spec.get("replicatedJobs"), list):
            spec["replicatedJobs"] = [rj for rj in spec["replicatedJobs"]
                                      if isinstance(rj, Mapping) and rj.get("name") in names]
        out.append(kept)
    return out



def kueue_entries(patches: Any) -> list[dict[str, Any]]:
    """The entries of ``patches`` (``spec.runtimePatches``) that Kueue manages."""
    return [dict(p) for p in (patches if isinstance(patches, list) else [])
            if isinstance(p, Mapping) and p.get("manager") == PATCH_MANAGER]


def with_admission(stored: Sequence[Any] | None, current: Any) -> list[dict[str, Any]]:
    """The stored patches with Kueue's entries replaced by the current TrainJob's."""
    kept = [dict(p) for p in (stored or []) if isinstance(p, Mapping)
            and p.get("manager") != PATCH_MANAGER]
    return [*kept, *kueue_entries(current)]


def without_kueue(stored: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The stored patches without Kueue's entries."""
    return with_admission(stored, [])


def _fields(template: Mapping[str, Any]) -> dict[str, Any]:
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    return {**{f"metadata.{k}": meta[k] for k in META_FIELDS if k in meta},
            **{f"spec.{k}": spec[k] for k in SPEC_FIELDS if k in spec}}


def _pod_templates(body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(rj["name"], rj["template"]["spec"]["template"])
            for rj in body["spec"]["replicatedJobs"]]


def record_base(body: dict[str, Any], base: Mapping[str, Any]) -> None:
    """Put the scheduling fields of ``base`` (the same JobSet laid out without Kueue's
    entry) into ``body``'s :data:`ANN_BASE` annotation."""
    fields = {name: _fields(t) for name, t in _pod_templates(base)}
    body["metadata"].setdefault("annotations", {})[ANN_BASE] = json.dumps(
        fields, sort_keys=True, separators=(",", ":"))


def _admitted(entries: Sequence[Mapping[str, Any]], rjob: str) -> list[Mapping[str, Any]]:
    """The pod templates Kueue's entries give replicated job ``rjob``, in order, each
    checked for shape (:func:`_checked`)."""
    out = []
    for i, entry in enumerate(entries):
        rjobs = dig(entry, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        for j, rj in enumerate(rjobs if isinstance(rjobs, list) else []):
            if isinstance(rj, Mapping) and rj.get("name") == rjob:
                pod = dig(rj, "template", "spec", "template")
                if pod is not None:
                    out.append(_checked(pod, f"spec.runtimePatches ({PATCH_MANAGER} #{i}): "
                                             f"replicatedJobs[{j}]"))
    return out


def _checked(pod: Any, where: str) -> Mapping[str, Any]:
    """``pod`` if its scheduling fields have the shapes Kubernetes gives them (string
    maps; lists of mappings), else :class:`BackendRejected` naming the field."""
    if not isinstance(pod, Mapping):
        raise BackendRejected(f"{where}: the pod template must be a mapping")
    for part, keys in (("metadata", META_FIELDS), ("spec", SPEC_FIELDS)):
        section = pod.get(part, {})
        if not isinstance(section, Mapping):
            raise BackendRejected(f"{where}: {part} must be a mapping")
        for key in keys:
            value = section.get(key)
            if value is None:
                continue
            ok = (isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items())
                if key in ("labels", "annotations", "nodeSelector") else
                isinstance(value, list) and all(isinstance(v, Mapping) for v in value))
            if not ok:
                raise BackendRejected(f"{where}: {part}.{key} must be "
                                      + ("a map of strings" if key in (
                                          "labels", "annotations", "nodeSelector")
                                         else "a list of mappings"))
    return pod


def _lay_over(fields: dict[str, Any], pod: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with a Kueue pod template laid over: maps merged, lists replaced (as
    :func:`k8s_adapter.jobset_merge.merge` does for a patch)."""
    out = copy.deepcopy(fields)
    for key, value in _fields(pod).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = copy.deepcopy(value)
    return out


def resume_ops(jobset: Mapping[str, Any], current: Any,
               identity_labels: Sequence[str]) -> list[dict[str, Any]] | None:
    """JSON-patch operations that lay the TrainJob's current Kueue entries (``current``:
    its ``spec.runtimePatches``) over the JobSet's pod templates as recorded without them
    (:data:`ANN_BASE`), each replicated job checked by name; ``identity_labels``: pod
    labels that keep their JobSet value whatever an entry says. None when the JobSet
    records no base (not laid out for Kueue). Raises :class:`BackendRejected` for an
    annotation or an entry of the wrong shape."""
    text = ((jobset.get("metadata") or {}).get("annotations") or {}).get(ANN_BASE)
    if text is None:
        return None
    try:
        base = json.loads(text)
        if not isinstance(base, dict) or not all(isinstance(v, dict) for v in base.values()):
            raise ValueError("not a mapping of mappings")
    except ValueError as exc:
        raise BackendRejected(f"JobSet annotation {ANN_BASE}: {exc}") from None
    entries = kueue_entries(current)
    ops: list[dict[str, Any]] = []
    for i, (name, template) in enumerate(_pod_templates(jobset)):
        fields = dict(base.get(name) or {})
        for pod in _admitted(entries, name):
            fields = _lay_over(fields, pod)
        labels = dict(fields.get("metadata.labels") or {})
        now = (template.get("metadata") or {}).get("labels") or {}
        labels.update({k: now[k] for k in identity_labels if k in now})
        fields["metadata.labels"] = labels
        where = f"/spec/replicatedJobs/{i}"
        ops.append({"op": "test", "path": f"{where}/name", "value": name})
        pod_path = f"{where}/template/spec/template"
        if "metadata" not in template:
            ops.append({"op": "add", "path": f"{pod_path}/metadata", "value": {}})
        for key in META_FIELDS:
            ops.append(_set(f"{pod_path}/metadata/{key}", fields.get(f"metadata.{key}"),
                            key in (template.get("metadata") or {})))
        for key in SPEC_FIELDS:
            ops.append(_set(f"{pod_path}/spec/{key}", fields.get(f"spec.{key}"),
                            key in (template.get("spec") or {})))
    return [op for op in ops if op]


def _set(path: str, value: Any, present: bool) -> dict[str, Any]:
    """The operation that makes ``path`` hold ``value`` (absent: removed, if present)."""
    if value is None:
        return {"op": "remove", "path": path} if present else {}
    if not isinstance(value, (Mapping, list)):
        raise BackendRejected(f"spec.runtimePatches ({PATCH_MANAGER}): {path.rsplit('/', 1)[1]} "
                              f"must be a mapping or a list")
    return {"op": "add", "path": path, "value": copy.deepcopy(value)}
