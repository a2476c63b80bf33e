"""k8s_adapter.inventory: Kubernetes nodes and pods → the bridge's Inventory.

The topology cases use the Kubernetes test bed's nodes (testbed/k8s/k8s.sh: kwok-node-1..4,
block-a, rack-1 = {1, 2}, rack-2 = {3, 4}) and end in bridge.placement, as the engine
uses the inventory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.placement import PlacementRequest, tree_best_fit
from bridge.topology import topology_from_inventory
from k8s_adapter.inventory import inventory_from_nodes, pod_requests, switches_from_labels

BLOCK = "topology.hpc-bridge.io/block"
RACK = "topology.hpc-bridge.io/rack"
HOSTNAME = "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOSTNAME)
BED = {"kwok-node-1": ("block-a", "rack-1"), "kwok-node-2": ("block-a", "rack-1"),
       "kwok-node-3": ("block-a", "rack-2"), "kwok-node-4": ("block-a", "rack-2")}


def node(name: str, *, cpu: str = "32", memory: str = "256Gi", gpus: int | None = 8,
         labels: Mapping[str, str] | None = None, unschedulable: bool = False,
         taints: Sequence[Mapping[str, str]] = (), ready: str | None = "True",
         ) -> dict[str, Any]:
    alloc: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus is not None:
        alloc["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = list(taints)
    status: dict[str, Any] = {"allocatable": alloc}
    if ready is not None:
        status["conditions"] = [{"type": "MemoryPressure", "status": "False"},
                                {"type": "Ready", "status": ready}]
    return {"metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
            "spec": spec, "status": status}


def bed_nodes(**changes: dict[str, Any]) -> list[dict[str, Any]]:
    return [node(n, labels={BLOCK: b, RACK: r}, **changes.get(n, {}))
            for n, (b, r) in BED.items()]


def container(cpu: str | None = None, memory: str | None = None, gpus: int = 0,
              key: str = "requests") -> dict[str, Any]:
    req: dict[str, Any] = {}
    if cpu is not None:
        req["cpu"] = cpu
    if memory is not None:
        req["memory"] = memory
    if gpus:
        req["nvidia.com/gpu"] = gpus
    return {"name": "c", "resources": {key: req}}


def pod(node_name: str | None, *containers: dict[str, Any], phase: str = "Running",
        init: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if node_name is not None:
        spec["nodeName"] = node_name
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


# --------------------------------------------------------------------------- capacity


def test_pod_requests_init_containers_count_by_max() -> None:
    p = pod("n", container("1", "1Gi", 1), container("500m", "512Mi"),
            init=[container("3", "100Mi"), container("200m", "1Gi", 2)])
    # cpu: max(1.5, 3) = 3; memory: max(1536, 1024) = 1536; gpus: max(1, 2) = 2
    assert pod_requests(p) == (3000, 1536, 2)
    assert pod_requests(pod("n")) == (0, 0, 0)
    # A container with only limits is counted by them (the apiserver's default).
    assert pod_requests(pod("n", container("2", "1Gi", key="limits"))) == (2000, 1024, 0)


_res = st.tuples(st.integers(0, 4000), st.integers(0, 4096), st.integers(0, 4))


@settings(max_examples=100, deadline=None)
@given(main=st.lists(_res, max_size=4), init=st.lists(_res, max_size=3))
def test_pod_requests_is_max_of_sum_and_largest_init(
        main: list[tuple[int, int, int]], init: list[tuple[int, int, int]]) -> None:
    def c(r: tuple[int, int, int]) -> dict[str, Any]:
        return container(f"{r[0]}m", f"{r[1]}Mi", r[2])
    got = pod_requests(pod("n", *map(c, main), init=[c(r) for r in init]))
    for i in range(3):
        assert got[i] == max(sum(r[i] for r in main), max((r[i] for r in init), default=0))


def test_free_is_allocatable_minus_unfinished_pods() -> None:
    pods = [
        pod("kwok-node-1", container("1500m", "1Gi", 2)),
        pod("kwok-node-1", container("1", "1Gi"), phase="Pending"),  # bound, not started
        pod("kwok-node-1", container("8", "8Gi", 4), phase="Succeeded"),
        pod("kwok-node-1", container("8", "8Gi", 4), phase="Failed"),
        pod(None, container("8", "8Gi", 4), phase="Pending"),  # not bound: no node
        pod("kwok-node-2", container("1", "1Gi"), init=[container("4", "2Gi", 1)]),
        pod("elsewhere", container("1")),
    ]
    inv = inventory_from_nodes(bed_nodes(), pods, LEVELS)
    by = {n.name: n for n in inv.nodes}
    assert list(by) == list(BED)
    n1, n2, n3 = by["kwok-node-1"], by["kwok-node-2"], by["kwok-node-3"]
    assert (n1.cpus, n1.memory_mb, n1.gpus) == (32, 256 * 1024, 8)
    assert (n1.free_cpus, n1.free_memory_mb, n1.free_gpus) == (29, 256 * 1024 - 2048, 6)
    assert (n2.free_cpus, n2.free_memory_mb, n2.free_gpus) == (28, 256 * 1024 - 2048, 7)
    assert (n3.free_cpus, n3.free_memory_mb, n3.free_gpus) == (32, 256 * 1024, 8)
    assert n1.state == "MIXED" and n3.state == "IDLE"
    assert f"{RACK}=rack-1" in n1.features
    assert not any(f.startswith(HOSTNAME) for f in n1.features)


def test_free_never_negative() -> None:
    inv = inventory_from_nodes([node("n", cpu="2", memory="1Gi", gpus=1)],
                               [pod("n", container("3", "2Gi", 2))], ())
    n = inv.nodes[0]
    assert (n.free_cpus, n.free_memory_mb, n.free_gpus) == (0, 0, 0)


@pytest.mark.parametrize(("changes", "state"), [
    ({"unschedulable": True}, "DRAIN"),
    ({"taints": [{"key": "k", "effect": "NoSchedule"}]}, "DRAIN"),
    ({"taints": [{"key": "k", "effect": "NoExecute"}]}, "DRAIN"),
    ({"ready": "False"}, "DRAIN"),
    ({"ready": "Unknown"}, "DRAIN"),
    ({"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}, "IDLE"),
    ({"ready": None}, "IDLE"),
    ({}, "IDLE"),
])
def test_unusable_nodes_drain(changes: dict[str, Any], state: str) -> None:
    inv = inventory_from_nodes(bed_nodes(**{"kwok-node-1": changes}), [], LEVELS)
    assert inv.nodes[0].state == state
    topo = topology_from_inventory(inv)
    assert topo.hosts["kwok-node-1"].usable is (state != "DRAIN")
    assert all(topo.hosts[n].usable for n in ("kwok-node-2", "kwok-node-3"))


# --------------------------------------------------------------------------- topology


def test_switches_of_the_test_bed() -> None:
    assert switches_from_labels(bed_nodes(), LEVELS) == {
        "block-a": (("rack-1", "rack-2"), ()),
        "rack-1": ((), ("kwok-node-1", "kwok-node-2")),
        "rack-2": ((), ("kwok-node-3", "kwok-node-4")),
    }
    # The hostname level may be left out; it is the host level either way.
    assert switches_from_labels(bed_nodes(), LEVELS[:2]) == switches_from_labels(
        bed_nodes(), LEVELS)
    assert switches_from_labels(bed_nodes(), [HOSTNAME]) == {}
    assert switches_from_labels(bed_nodes(), []) == {}


def test_same_rack_name_in_two_blocks_stays_two_switches() -> None:
    nodes = [node("a1", labels={BLOCK: "block-a", RACK: "r1"}),
             node("a2", labels={BLOCK: "block-a", RACK: "r1"}),
             node("b1", labels={BLOCK: "block-b", RACK: "r1"}),
             node("b2", labels={BLOCK: "block-b", RACK: "r2"})]
    sw = switches_from_labels(nodes, LEVELS)
    assert sw == {
        "block-a": (("r1@block-a",), ()),
        "block-b": (("r1@block-b", "r2"), ()),
        "r1@block-a": ((), ("a1", "a2")),
        "r1@block-b": ((), ("b1",)),
        "r2": ((), ("b2",)),
    }
    leaves = {d.name: d.hosts for d in topology_from_inventory(
        inventory_from_nodes(nodes, [], LEVELS)).leaves}
    assert leaves == {"r1@block-a": ("a1", "a2"), "r1@block-b": ("b1",), "r2": ("b2",)}


def test_nodes_missing_a_level_label_are_left_out() -> None:
    nodes = [*bed_nodes(), node("no-rack", labels={BLOCK: "block-a"}),
             node("empty-rack", labels={BLOCK: "block-a", RACK: ""}), node("bare")]
    sw = switches_from_labels(nodes, LEVELS)
    assert sw == switches_from_labels(bed_nodes(), LEVELS)
    inv = inventory_from_nodes(nodes, [], LEVELS)
    assert {n.name for n in inv.nodes} == {*BED, "no-rack", "empty-rack", "bare"}
    topo = topology_from_inventory(inv)
    in_tree = {h for d in topo.leaves for h in d.hosts}
    assert in_tree == set(BED)


def test_placement_on_the_test_bed_stays_in_one_rack() -> None:
    topo = topology_from_inventory(inventory_from_nodes(bed_nodes(), [], LEVELS))
    assert sorted(d.name for d in topo.leaves) == ["rack-1", "rack-2"]
    racks = {"rack-1": {"kwok-node-1", "kwok-node-2"}, "rack-2": {"kwok-node-3", "kwok-node-4"}}
    placed = tree_best_fit(topo, PlacementRequest(count=2, cpu_millis=16000))
    assert placed.fits, placed.reason
    assert len(placed.leaf_domains) == 1
    assert set(placed.hosts) == racks[placed.leaf_domains[0]]

    # rack-1 has one usable node left (node-1 cordoned, node-2 busy): rack-2 it is.
    busy = [pod("kwok-node-2", container("31"))]
    topo = topology_from_inventory(inventory_from_nodes(
        bed_nodes(**{"kwok-node-1": {"unschedulable": True}}), busy, LEVELS))
    placed = tree_best_fit(topo, PlacementRequest(count=2, cpu_millis=16000))
    assert placed.fits and placed.leaf_domains == ("rack-2",)
    assert set(placed.hosts) == racks["rack-2"]

    # Three nodes cannot fit in one rack: both racks, under the one block.
    topo = topology_from_inventory(inventory_from_nodes(bed_nodes(), [], LEVELS))
    placed = tree_best_fit(topo, PlacementRequest(count=3, cpu_millis=16000))
    assert placed.fits and sorted(placed.leaf_domains) == ["rack-1", "rack-2"]


@pytest.mark.parametrize("changes", [{}, {"unschedulable": True},
                                     {"taints": [{"key": "k", "effect": "NoExecute"}]},
                                     {"ready": "False"}])
def test_the_watch_cache_keeps_what_the_inventory_reads(changes: dict[str, Any]) -> None:
    """The back end keeps trimmed nodes and pods from its watches: the inventory of the
    trimmed objects is the inventory of the full ones."""
    from k8s_adapter.capacity import trim as _trim

    nodes = bed_nodes(**{"kwok-node-2": changes})
    pods = [pod("kwok-node-1", container("1500m", "1Gi", 2)),
            pod("kwok-node-2", container("1", "1Gi"), init=[container("4", "2Gi", 1)]),
            pod("kwok-node-3", container("8", "8Gi", 4), phase="Pending")]
    full = inventory_from_nodes(nodes, pods, LEVELS)
    trimmed = inventory_from_nodes([_trim(n) for n in nodes], [_trim(p) for p in pods], LEVELS)
    assert trimmed == full
