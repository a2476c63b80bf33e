"""The Kubernetes back end's calls for TrainJobs that Kueue queues (:mod:`k8s_adapter.kueue`).

* :func:`admitted_body` — at submission of a TrainJob CR Kueue may queue: the TrainJob
  as the apiserver holds it now (its uid must be the job's); the JobSet laid out without
  any Kueue entry and without the engine's pinned hosts (the base
  :func:`k8s_adapter.kueue.record_base` keeps); Kueue's current entry, cut to the
  replicated jobs of that layout and checked as a user's patch is; and the JobSet laid
  out with it in place of the stored one.
* :func:`resume_operations` — when such a JobSet is resumed: the JSON-patch operations
  that carry Kueue's new decision into it (:func:`k8s_adapter.kueue.resume_ops`), or
  None for a JobSet that records no base.

Reads use the bridge's own identity (the TrainJob door's); a TrainJob that is gone or
was made again under the same name is :class:`BackendRejected`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from bridge.backend import BackendRejected, SubmitRequest
from bridge.model import GROUP as TRAINER_GROUP
from bridge.model import VERSION as TRAINER_VERSION
from bridge.model import TrainJob
from k8s_adapter import kueue
from k8s_adapter.access import AccessPolicy
from k8s_adapter.jobset import (
    GROUP,
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    PLURAL,
    TRAINJOB_NAME_LABEL,
    UID_LABEL,
    VERSION,
)
from k8s_adapter.kube import Kube, is_status

__all__ = ["IDENTITY_LABELS", "admitted_body", "resume_operations"]

#: Pod labels that name the job: no Kueue entry changes them.
IDENTITY_LABELS = (MANAGED_BY_LABEL, UID_LABEL, JOB_ID_LABEL, TRAINJOB_NAME_LABEL)


async def _current_patches(kube: Kube, namespace: str, name: str, uid: str) -> Any:
    """The TrainJob's ``spec.runtimePatches`` as the apiserver holds it now."""
    try:
        obj = await kube.call(
            f"get TrainJob {namespace}/{name}", kube.custom.get_namespaced_custom_object,
            TRAINER_GROUP, TRAINER_VERSION, namespace, "trainjobs", name)
    except BackendRejected as exc:
        if is_status(exc, 404):
            raise BackendRejected(f"TrainJob {namespace}/{name} is gone") from None
        raise
    if (obj.get("metadata") or {}).get("uid") != uid:
        raise BackendRejected(f"TrainJob {namespace}/{name} was made again (another uid)")
    return (obj.get("spec") or {}).get("runtimePatches")


def _with_patches(job: TrainJob, patches: list[dict[str, Any]]) -> TrainJob:
    return job.model_copy(update={"spec": job.spec.model_copy(
        update={"runtime_patches": patches or None})})


async def admitted_body(kube: Kube, access: AccessPolicy, request: SubmitRequest,
                        render: Callable[[SubmitRequest], dict[str, Any]]) -> dict[str, Any]:
    """The JobSet ``render`` lays out for ``request`` as Kueue admitted it, with its base
    recorded (see the module docstring)."""
    job = request.job
    current = await _current_patches(kube, str(job.metadata.namespace), job.metadata.name,
                                     str(job.metadata.uid))
    stored = job.spec.runtime_patches
    base_request = replace(request, placement=None,
                           job=_with_patches(job, kueue.without_kueue(stored)))
    base = render(base_request)
    names = {rj["name"] for rj in base["spec"]["replicatedJobs"]}
    entries = kueue.only_jobs(kueue.kueue_entries(current), names)
    access.check_patches(entries)
    body = render(replace(base_request, job=_with_patches(job, kueue.with_admission(
        stored, entries))))
    kueue.record_base(body, base)
    return body


def _owner_trainjob(jobset: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in (jobset.get("metadata") or {}).get("ownerReferences") or []:
        if (isinstance(ref, Mapping) and ref.get("kind") == "TrainJob"
                and str(ref.get("apiVersion", "")).startswith(f"{TRAINER_GROUP}/")):
            return str(ref.get("name")), str(ref.get("uid"))
    return None


async def resume_operations(kube: Kube, access: AccessPolicy, namespace: str, name: str
                            ) -> list[dict[str, Any]] | None:
    """The operations that carry Kueue's decision into JobSet ``namespace/name`` (see
    the module docstring), or None."""
    try:
        jobset = await kube.call(
            f"get JobSet {namespace}/{name}", kube.custom.get_namespaced_custom_object,
            GROUP, VERSION, namespace, PLURAL, name)
    except BackendRejected as exc:
        if is_status(exc, 404):
            return None  # the resume's own patch says so
        raise
    annotations = (jobset.get("metadata") or {}).get("annotations") or {}
    owner = _owner_trainjob(jobset)
    if kueue.ANN_BASE not in annotations or owner is None:
        return None
    current = await _current_patches(kube, namespace, *owner)
    access.check_patches(kueue.kueue_entries(current))
    try:
        return kueue.resume_ops(jobset, current, IDENTITY_LABELS)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        # A JobSet changed by hand: refused, never another error.
        raise BackendRejected(f"JobSet {namespace}/{name} cannot be resumed as Kueue "
                              f"admitted it: {type(exc).__name__}: {str(exc)[:300]}") from None
