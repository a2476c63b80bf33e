"""The Kubernetes back end's capacity, kept from watches as an informer keeps its cache:
a placement then costs no API call.

Contract (:class:`Capacity`):

* Three sources, each a list-then-watch (:meth:`k8s_adapter.kube.Kube.list_watch`):
  the nodes; the bound, unfinished pods that are NOT the bridges' (selected by
  :data:`BOUND_PODS` and :data:`OTHER_PODS`); and the bridges' own pods, taken from the
  back end's job pod watch (the bridges' label and :data:`BOUND_PODS`;
  :meth:`Capacity.note_own` keeps those that :func:`holds_capacity`, all of them but
  for a re-listing's race). Together they are exactly the pods one watch of
  :data:`BOUND_PODS` would give, and each of the bridges' pod events is decoded once,
  not twice.
* :meth:`Capacity.inventory` is None until all three have listed; after that it is
  computed again only when :attr:`Capacity.version` changed.
* Objects are kept trimmed (:func:`trim`) to what the inventory reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.nodes import Inventory
from k8s_adapter.inventory import inventory_from_nodes
from k8s_adapter.jobset import MANAGED_BY_LABEL, MANAGED_BY_VALUE

__all__ = ["BOUND_PODS", "NODES", "OTHER_BOUND_PODS", "OTHER_PODS", "OWN_PODS", "Capacity",
           "holds_capacity", "trim"]

#: Pods that hold capacity: bound to a node and not finished.
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
#: The capacity watch's label selector: every pod but the bridges' own, which the job
#: pod watch sees already (decoding each event once, not twice).
OTHER_PODS = f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}"
#: The sources, by the name their watch has.
NODES, OTHER_BOUND_PODS, OWN_PODS = "nodes", "bound pods", "own pods"


def holds_capacity(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is one :data:`BOUND_PODS` selects: bound, not finished."""
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def trim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the inventory reads of a node or pod (a pod's manifest can be large)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}

    def resources(cs: Any) -> list[dict[str, Any]]:
        return [{"resources": c.get("resources") or {}} for c in cs or []]

    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "uid": meta.get("uid"), "labels": meta.get("labels") or {},
                         "deletionTimestamp": meta.get("deletionTimestamp")},
            "spec": {"nodeName": spec.get("nodeName"), "unschedulable": spec.get("unschedulable"),
                     "taints": spec.get("taints") or [],
                     "nodeSelector": spec.get("nodeSelector") or {},
                     "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds"),
                     "containers": resources(spec.get("containers")),
                     "initContainers": resources(spec.get("initContainers"))},
            "status": {"phase": status.get("phase"),
                       "allocatable": status.get("allocatable") or {},
                       "conditions": [{"type": c.get("type"), "status": c.get("status")}
                                      for c in status.get("conditions") or []]}}


@dataclass
class Capacity:
    """Nodes and bound pods as the watches last showed them (by namespace/name): the
    bridges' own pods (``own``) apart from all others (``pods``)."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    own: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The sources that have listed.
    synced: set[str] = field(default_factory=set)
    #: Changes whenever :meth:`known_nodes` or :meth:`bound_pods` does.
    version: int = 0
    _cached: tuple[int, Inventory] | None = None

    def note(self, source: str, kind: str, payload: Any) -> None:
        """One event of the ``source`` watch (:data:`NODES` or :data:`OTHER_BOUND_PODS`):
        ``SYNC`` (``payload``: every object), ``DELETED`` (for pods, also: finished and
        so out of the selection) or a change."""
        cache = self.nodes if source == NODES else self.pods
        if kind == "SYNC":
            cache.clear()
            cache.update({key(o): trim(o) for o in payload})
            self.synced.add(source)
        elif kind == "DELETED":
            cache.pop(key(payload), None)
        else:
            cache[key(payload)] = trim(payload)
        self.version += 1

    def note_own(self, kind: str, payload: Any) -> None:
        """One event of the job pod watch (the bridges' bound, unfinished pods; DELETED
        also for one that finished): those that hold capacity are kept."""
        if kind == "SYNC":
            self.own.clear()
            self.own.update({key(o): trim(o) for o in payload if holds_capacity(o)})
            self.synced.add(OWN_PODS)
        elif kind != "DELETED" and holds_capacity(payload):
            self.own[key(payload)] = trim(payload)
        elif self.own.pop(key(payload), None) is None:
            return  # it held none and holds none: nothing changed
        self.version += 1

    def known_nodes(self) -> list[dict[str, Any]]:
        return list(self.nodes.values())

    def bound_pods(self) -> list[dict[str, Any]]:
        """Each pod once: one whose label changed may be in both watches a moment."""
        return list({**self.pods, **self.own}.values())

    def inventory(self, level_keys: Sequence[str]) -> Inventory | None:
        """The inventory, once every source has listed (else None)."""
        if not self.synced >= {NODES, OTHER_BOUND_PODS, OWN_PODS}:
            return None
        if self._cached is None or self._cached[0] != self.version:
            self._cached = (self.version, inventory_from_nodes(
                self.known_nodes(), self.bound_pods(), level_keys))
        return self._cached[1]
