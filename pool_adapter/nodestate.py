"""A Slurm node out of use shows on its Kubernetes node (pure functions).

A pool node that Slurm has drained, or sees down, failing or in maintenance, gets the
taint ``hpc-bridge.io/slurm-unavailable=<STATE>:NoSchedule`` on its Kubernetes node
(``kubectl describe node`` shows why; no new pod lands there even if it tolerates the
pool); the taint goes when Slurm takes the node back. Only that one taint is the
bridge's: every other taint is kept as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog

from bridge.backend import BackendError
from bridge.nodes import NodeInfo
from k8s_adapter.backend import KubernetesBackend
from k8s_adapter.kube import MERGE_PATCH
from pool_adapter.nodemap import NodeMap, UnmappedNode
from slurm_adapter.backend import SlurmBackend
from slurm_adapter.records import UNUSABLE_NODE_STATES

log = structlog.get_logger(__name__)

TAINT_KEY = "hpc-bridge.io/slurm-unavailable"


def unusable_state(node: NodeInfo) -> str | None:
    """The first of the node's states that takes it out of use (None: usable)."""
    for state in node.state.split("+"):
        if state in UNUSABLE_NODE_STATES:
            return state
    return None


def wanted_taints(current: Sequence[Mapping[str, Any]], state: str | None
                  ) -> list[dict[str, Any]] | None:
    """The node's taints with the bridge's one set for ``state`` (None: removed), or
    None when they already are so."""
    others = [dict(t) for t in current if t.get("key") != TAINT_KEY]
    ours = [dict(t) for t in current if t.get("key") == TAINT_KEY]
    want = [] if state is None else [{"key": TAINT_KEY, "value": state,
                                      "effect": "NoSchedule"}]
    if [(t.get("value"), t.get("effect")) for t in ours] == \
            [(t["value"], t["effect"]) for t in want]:
        return None
    return others + want


def changes(slurm_nodes: Iterable[NodeInfo], to_k8s: Mapping[str, str],
            k8s_nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Kubernetes node name -> its new taints, for each pool node whose taint must
    change. ``to_k8s`` maps the Slurm names of the pool; ``k8s_nodes`` are the Node
    objects by name (a node not there is skipped)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for node in slurm_nodes:
        name = to_k8s.get(node.name)
        obj = k8s_nodes.get(name) if name else None
        if name is None or obj is None:
            continue
        taints = wanted_taints((obj.get("spec") or {}).get("taints") or [],
                               unusable_state(node))
        if taints is not None:
            out[name] = taints
    return out


class NodeStates:
    """Keeps the pool's Kubernetes nodes tainted as Slurm's node states say, every
    ``interval`` seconds (one Slurm node listing; a Node read and patch only for a
    node whose taint changes, guarded by its ``resourceVersion``)."""

    def __init__(self, name: str, slurm: SlurmBackend, k8s: KubernetesBackend,
                 nodemap: NodeMap,
                 pool_label: str | None, interval: float):
        self.name = name
        self.slurm = slurm
        self.k8s = k8s
        self.nodemap = nodemap
        self.pool_label = pool_label
        self.interval = interval
        #: The pool's Kubernetes nodes that are this Slurm cluster's (the last pass's;
        #: None before the first): the only nodes whose allocation labels and pinned
        #: pods the pool may clean up (another Slurm cluster's pool may share the
        #: Kubernetes cluster).
        self.pool_nodes: frozenset[str] | None = None

    def _pool(self) -> dict[str, Mapping[str, Any]]:
        """The pool's Kubernetes nodes (with the pool label, when there is one)."""
        nodes: dict[str, Mapping[str, Any]] = {}
        for obj in self.k8s.known_nodes():
            meta = obj.get("metadata") or {}
            if self.pool_label and (meta.get("labels") or {}).get(self.pool_label) != "true":
                continue
            nodes[str(meta.get("name"))] = obj
        return nodes

    async def sync_once(self) -> list[str]:
        """One pass; the Kubernetes nodes whose taint was changed."""
        k8s_nodes = self._pool()
        if not k8s_nodes:
            if self.k8s.known_nodes():  # else the node watch has not listed yet: unknown
                self.pool_nodes = frozenset()
            return []
        inventory = await self.slurm.inventory()
        to_k8s: dict[str, str] = {}
        known = list(self.k8s.known_nodes())
        for node in inventory.nodes:
            try:
                (to_k8s[node.name],) = self.nodemap.to_kubernetes([node.name], known)
            except UnmappedNode:
                continue
        self.pool_nodes = frozenset(to_k8s.values()) & frozenset(k8s_nodes)
        changed: list[str] = []
        kube = self.k8s.kube
        for name in changes(inventory.nodes, to_k8s, k8s_nodes):
            obj = await kube.raw(f"get node {name}", kube.core.read_node, name)
            taints = wanted_taints((obj.get("spec") or {}).get("taints") or [],
                                   next((unusable_state(n) for n in inventory.nodes
                                         if to_k8s.get(n.name) == name), None))
            if taints is None:
                continue
            await kube.call(f"taint node {name}", kube.core.patch_node, name,
                            {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                             "spec": {"taints": taints}}, _content_type=MERGE_PATCH)
            changed.append(name)
        return changed

    async def run(self) -> None:
        """Forever; a failed pass is logged and the next one tries again."""
        while True:
            try:
                changed = await self.sync_once()
                if changed:
                    log.info("k8s-on-slurm %s: Slurm node states copied to %s", self.name,
                             ", ".join(changed))
            except BackendError as exc:
                log.warning("k8s-on-slurm %s: node states not copied this round: %s",
                            self.name, exc)
            except Exception:
                log.exception("k8s-on-slurm %s: copying node states failed", self.name)
            await asyncio.sleep(self.interval)
