"""Kubernetes nodes → the bridge's :class:`~bridge.backend.Inventory` (pure).

* Free capacity is ``status.allocatable`` minus the requests of the pods bound to the
  node that have not finished (phase not ``Succeeded``/``Failed``), as kube-scheduler
  counts it (a container's request; init containers count by their maximum).
* A node that is cordoned (``spec.unschedulable``), not ``Ready``, or tainted
  ``NoSchedule``/``NoExecute`` is reported ``DRAIN`` and places nothing.
* Topology: the configured node label keys, top level first (like a Kueue
  ``Topology``'s ``spec.levels``; a trailing ``kubernetes.io/hostname`` is the host
  level and is dropped). Each distinct label value path becomes a switch of the
  inventory; nodes missing a level label hang under no switch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.backend import Inventory, NodeInfo
from bridge.topology import cpu_millis, memory_mb

HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915")


def _gpus(values: Mapping[str, Any]) -> int:
    return sum(int(float(str(values[k]))) for k in GPU_RESOURCES if k in values)


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int, int]:
    """(cpu millis, memory MB, GPUs) a pod holds on its node."""
    spec = pod.get("spec") or {}

    def total(containers: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, int]]:
        out = []
        for c in containers:
            req = ((c.get("resources") or {}).get("requests")
                   or (c.get("resources") or {}).get("limits") or {})
            out.append((cpu_millis(req["cpu"]) if "cpu" in req else 0,
                        memory_mb(req["memory"]) if "memory" in req else 0, _gpus(req)))
        return out

    main = total(spec.get("containers") or [])
    init = total(spec.get("initContainers") or [])
    sums = [sum(x[i] for x in main) for i in range(3)]
    maxes = [max((x[i] for x in init), default=0) for i in range(3)]
    cpu, mem, gpu = (max(s, m) for s, m in zip(sums, maxes, strict=True))
    return cpu, mem, gpu


def _usable(node: Mapping[str, Any]) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return not ready or ready[0].get("status") == "True"


def inventory_from_nodes(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                         level_keys: Sequence[str]) -> Inventory:
    """The inventory of ``nodes`` with ``pods`` taking their capacity (module docstring)."""
    used: dict[str, list[int]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        c, m, g = pod_requests(pod)
        u = used.setdefault(node_name, [0, 0, 0])
        u[0] += c
        u[1] += m
        u[2] += g
    infos = []
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        alloc = (node.get("status") or {}).get("allocatable") or {}
        cpus = cpu_millis(alloc.get("cpu", 0)) // 1000
        mem = memory_mb(alloc.get("memory", 0))
        gpus = _gpus(alloc)
        u = used.get(name, [0, 0, 0])
        state = "IDLE" if u == [0, 0, 0] else "MIXED"
        if not _usable(node):
            state = "DRAIN"
        infos.append(NodeInfo(
            name=name, state=state, cpus=cpus,
            free_cpus=max(0, (cpu_millis(alloc.get("cpu", 0)) - u[0]) // 1000),
            memory_mb=mem, free_memory_mb=max(0, mem - u[1]), gpus=gpus,
            free_gpus=max(0, gpus - u[2]),
            features=_features(meta.get("labels") or {}),
        ))
    return Inventory(nodes=tuple(infos), switches=switches_from_labels(nodes, level_keys))


def _features(labels: Mapping[str, Any]) -> tuple[str, ...]:
    """A node's features for ``--constraint``: each label as ``key=value`` and ``key``
    (what :func:`k8s_adapter.affinity.node_affinity` asks of the scheduler), at most
    1024 (nodes labelled by feature discovery carry a hundred labels and more)."""
    found: set[str] = set()
    for key, value in labels.items():
        if not key.startswith("kubernetes.io/hostname"):
            found.update((f"{key}={value}", key))
    return tuple(sorted(found))[:1024]


def switches_from_labels(nodes: Sequence[Mapping[str, Any]], level_keys: Sequence[str],
                         ) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Switch name → (child switches, nodes) from node labels (module docstring).

    A switch is named by its label value when that value is unique across all levels,
    else ``<value>@<parent>`` so that two racks named ``r1`` in different blocks stay
    two switches.
    """
    keys = [k for k in level_keys]
    if keys and keys[-1] == HOSTNAME_LABEL:
        keys.pop()
    if not keys:
        return {}
    paths: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        values = tuple(labels.get(k) for k in keys)
        if all(values):
            paths[str((node.get("metadata") or {}).get("name"))] = tuple(str(v) for v in values)
    prefixes = {p[:i + 1] for p in paths.values() for i in range(len(keys))}
    by_value: dict[str, set[tuple[str, ...]]] = {}
    for p in prefixes:
        by_value.setdefault(p[-1], set()).add(p)

    def name(prefix: tuple[str, ...]) -> str:
        if len(by_value[prefix[-1]]) == 1:
            return prefix[-1]
        return "@".join(reversed(prefix))

    switches: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for prefix in sorted(prefixes, key=lambda p: (len(p), p)):
        depth = len(prefix)
        if depth == len(keys):
            members = tuple(sorted(n for n, p in paths.items() if p == prefix))
            switches[name(prefix)] = ((), members)
        else:
            kids = tuple(name(c) for c in sorted(q for q in prefixes
                                                 if len(q) == depth + 1 and q[:depth] == prefix))
            switches[name(prefix)] = (kids, ())
    return switches
