"""Kubeflow Trainer's ``spec.podSpecOverrides`` (v1alpha1) as runtime patches.

Each override names the replicated jobs it applies to (``targetJobs: [{name}]``) and
the pod fields Trainer lets it set: ``serviceAccountName``, ``nodeSelector``,
``affinity``, ``tolerations``, ``volumes``, ``initContainers`` and ``containers``
(each ``{name, env, volumeMounts}``), ``schedulingGates`` and ``imagePullSecrets``.
:func:`as_runtime_patches` writes them as ``spec.runtimePatches`` entries, so that the
one merge (:func:`k8s_adapter.jobset.render_jobset`) and the one privilege check
(:func:`k8s_adapter.podsecurity.check_patches`) apply to both: an override cannot do
what a patch may not. A field Trainer does not define, or a value of the wrong shape,
is :class:`BackendRejected` naming it, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.backend import BackendRejected

__all__ = ["POD_FIELDS", "as_runtime_patches"]

#: The pod fields an override may set (Trainer v1alpha1 ``PodSpecOverride``).
POD_FIELDS = ("serviceAccountName", "nodeSelector", "affinity", "tolerations", "volumes",
              "initContainers", "containers", "schedulingGates", "imagePullSecrets")
#: What a container override may set.
_CONTAINER_FIELDS = frozenset({"name", "env", "volumeMounts"})
#: The shape of each field (a list, a mapping or a string), checked before anything
#: reads it.
_SHAPES: dict[str, tuple[type, str]] = {
    "serviceAccountName": (str, "a string"), "nodeSelector": (Mapping, "a mapping"),
    "affinity": (Mapping, "a mapping"), "tolerations": (list, "a list"),
    "volumes": (list, "a list"), "initContainers": (list, "a list"),
    "containers": (list, "a list"), "schedulingGates": (list, "a list"),
    "imagePullSecrets": (list, "a list")}


def as_runtime_patches(overrides: Any) -> list[dict[str, Any]]:
    """``spec.podSpecOverrides`` as ``spec.runtimePatches`` entries (module docstring)."""
    if overrides is None:
        return []
    if not isinstance(overrides, list):
        raise BackendRejected("spec.podSpecOverrides: must be a list")
    patches = []
    for i, override in enumerate(overrides):
        where = f"spec.podSpecOverrides[{i}]"
        if not isinstance(override, Mapping):
            raise BackendRejected(f"{where}: must be a mapping")
        unknown = sorted(set(override) - {"targetJobs", *POD_FIELDS})
        if unknown:
            raise BackendRejected(f"{where}.{unknown[0]}: not a field of a pod spec override "
                                  f"(Trainer allows targetJobs, {', '.join(POD_FIELDS)})")
        targets = override.get("targetJobs")
        if not isinstance(targets, list) or not targets or not all(
                isinstance(t, Mapping) and isinstance(t.get("name"), str) for t in targets):
            raise BackendRejected(f"{where}.targetJobs: a non-empty list of {{name: ...}}")
        for key, (shape, kind) in _SHAPES.items():
            if key in override and not isinstance(override[key], shape):
                raise BackendRejected(f"{where}.{key}: must be {kind}")
        for key in ("initContainers", "containers"):
            for j, ctr in enumerate(override.get(key) or []):
                if not isinstance(ctr, Mapping) or not isinstance(ctr.get("name"), str):
                    raise BackendRejected(f"{where}.{key}[{j}]: a mapping with a name")
                extra = sorted(set(ctr) - _CONTAINER_FIELDS)
                if extra:
                    raise BackendRejected(f"{where}.{key}[{j}].{extra[0]}: a container "
                                          f"override sets only name, env and volumeMounts")
                for field in ("env", "volumeMounts"):
                    if field in ctr and not isinstance(ctr[field], list):
                        raise BackendRejected(f"{where}.{key}[{j}].{field}: must be a list")
        pod = {k: override[k] for k in POD_FIELDS if k in override}
        patches.append({"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": t["name"], "template": {"spec": {"template": {"spec": pod}}}}
            for t in targets]}}}})
    return patches
