"""Merging into a JobSet: Trainer's template patches and the bridge's own merge (pure).

:func:`merge` is strategic-merge-like (maps recursively; lists of named items, by
``name``); :func:`apply_template_patch` merges a Trainer ``JobSetTemplatePatch``
(``spec.runtimePatches[*].trainingRuntimeSpec.template``, ``spec.podSpecOverrides``
written as patches) into a JobSet body, refusing a replicated job the body does not
have (:class:`BackendRejected` naming the patch).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from bridge.backend import BackendRejected

__all__ = ["apply_template_patch", "merge"]


def apply_template_patch(body: dict[str, Any], template: Mapping[str, Any],
                          where: str) -> dict[str, Any]:
    """Merge a Trainer ``JobSetTemplatePatch`` (metadata + spec.replicatedJobs[…]) in;
    ``where`` names the patch in errors."""
    out = dict(body)
    if "metadata" in template:
        patch_meta = template["metadata"]
        if not isinstance(patch_meta, Mapping):
            raise BackendRejected(f"{where}.trainingRuntimeSpec.template.metadata: must be a "
                                  f"mapping")
        meta = dict(out["metadata"])
        for key in ("labels", "annotations"):
            if key in patch_meta:
                if not isinstance(patch_meta[key], Mapping):
                    raise BackendRejected(f"{where}.trainingRuntimeSpec.template.metadata."
                                          f"{key}: must be a mapping")
                meta[key] = {**meta.get(key, {}), **patch_meta[key]}
        out["metadata"] = meta
    spec_patch = template.get("spec") or {}
    if not isinstance(spec_patch, Mapping):
        raise BackendRejected(f"{where}.trainingRuntimeSpec.template.spec: must be a mapping")
    for key in sorted(set(spec_patch) - {"replicatedJobs"}):
        # Trainer's JobSetSpecPatch has replicatedJobs only: a patch does not reach the
        # JobSet's own fields (volumeClaimPolicies would bind any volume, as JobSet).
        raise BackendRejected(f"{where}.trainingRuntimeSpec.template.spec.{key}: not a "
                              f"field of a runtime patch (only replicatedJobs)")
    known = {rj["name"] for rj in out["spec"]["replicatedJobs"]}
    for i, rj in enumerate(spec_patch.get("replicatedJobs") or []):
        if (not isinstance(rj, Mapping) or not isinstance(rj.get("name"), str)
                or rj["name"] not in known):
            name = rj.get("name") if isinstance(rj, Mapping) else rj
            raise BackendRejected(
                f"{where}: replicatedJobs[{i}] names {name!r}; this runtime's "
                f"JobSet has {', '.join(sorted(known))}")
    if spec_patch:
        out["spec"] = merge(out["spec"], spec_patch)
    return out


_NAMED_LISTS = frozenset({"replicatedJobs", "containers", "initContainers", "env", "volumes",
                          "volumeMounts", "ports"})


#: Named lists whose items replace each other whole (an ``env`` item's ``value`` and
#: ``valueFrom`` exclude each other: Trainer's ``UpsertEnvVars`` replaces the item).
_REPLACED_ITEMS = frozenset({"env"})


def merge(base: Any, patch: Any, key: str = "") -> Any:
    """Strategic-merge-like: maps merge recursively; lists of named items (by ``name``, a
    string in every item) merge item by item (``env`` items replace:
    :data:`_REPLACED_ITEMS`; new names appended); other values, and a list with an
    item whose ``name`` is not a string, are replaced (never a TypeError: patches are
    the user's, and the apiserver names the bad field)."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    if (key in _NAMED_LISTS and isinstance(base, list) and isinstance(patch, list)
            and all(isinstance(i, Mapping) and isinstance(i.get("name"), str)
                    for i in [*base, *patch])):
        merged = [dict(i) for i in base]
        index = {i["name"]: n for n, i in enumerate(merged)}
        for item in patch:
            if item["name"] in index and key in _REPLACED_ITEMS:
                merged[index[item["name"]]] = copy.deepcopy(dict(item))
            elif item["name"] in index:
                merged[index[item["name"]]] = merge(merged[index[item["name"]]], item)
            else:
                merged.append(copy.deepcopy(dict(item)))
        return merged
    return copy.deepcopy(patch)
