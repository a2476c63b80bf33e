"""bridge.topology: one model built from a Slurm inventory and from Kubernetes labels."""

from __future__ import annotations

import pytest

from bridge.backend import Inventory, NodeInfo
from bridge.topology import (
    FLAT_ROOT,
    HOSTNAME_LABEL,
    Host,
    LabelledNode,
    cpu_millis,
    host_from_kubernetes,
    memory_mb,
    topology_from_inventory,
    topology_from_node_labels,
)

BED_SWITCHES = {"leaf1": ((), ("node1", "node2")), "leaf2": ((), ("node3", "node4")),
                "spine": (("leaf1", "leaf2"), ())}


def node(name: str, state: str = "IDLE", free: int = 2) -> NodeInfo:
    return NodeInfo(name=name, state=state, cpus=2, free_cpus=free, memory_mb=2000,
                    free_memory_mb=2000, partitions=("debug",))


def test_slurm_tree_of_the_test_bed() -> None:
    inv = Inventory(nodes=tuple(node(f"node{i}") for i in range(1, 5)), switches=BED_SWITCHES)
    topo = topology_from_inventory(inv)
    assert [d.name for d in topo.roots] == ["spine"]
    assert [(d.name, d.level, d.height) for d in topo.domains] == [
        ("spine", "level1", 1), ("leaf1", "leaf", 0), ("leaf2", "leaf", 0)]
    assert topo.levels == ("level1", "leaf") and topo.host_level == "node"
    assert list(topo.order) == ["node1", "node2", "node3", "node4"]
    assert topo.leaf_of["node3"].name == "leaf2"
    assert [d.name for d in topo.ancestors(topo.leaf_of["node3"])] == ["leaf2", "spine"]
    assert topo.leaf_of["node1"].path == ("spine", "leaf1")
    assert not topo.spanning
    h = topo.hosts["node1"]
    assert (h.cpu_millis, h.free_cpu_millis, h.free_memory_mb) == (2000, 2000, 2000)
    assert h.partitions == {"debug"} and h.idle


@pytest.mark.parametrize("state", ["DOWN", "IDLE+DRAIN", "MIXED+DRAIN", "DOWN+NOT_RESPONDING",
                                   "UNKNOWN", "IDLE+POWERED_DOWN", "idle+drain"])
def test_down_drained_unknown_nodes_are_not_usable(state: str) -> None:
    topo = topology_from_inventory(Inventory(nodes=(node("n1", state),)))
    h = topo.hosts["n1"]
    assert not h.usable and h.free_cpu_millis == 0 and not h.idle


@pytest.mark.parametrize("state", ["IDLE", "MIXED", "ALLOCATED", "IDLE+CLOUD", "COMPLETING"])
def test_working_states_are_usable(state: str) -> None:
    assert topology_from_inventory(Inventory(nodes=(node("n1", state),))).hosts["n1"].usable


def test_without_switches_the_cluster_is_one_flat_domain() -> None:
    topo = topology_from_inventory(Inventory(nodes=(node("b"), node("a"))))
    assert [d.name for d in topo.roots] == [FLAT_ROOT]
    assert topo.roots[0].hosts == ("b", "a")  # the world's order


def test_nodes_outside_the_tree_and_mixed_switches() -> None:
    switches = {"top": (("l1",), ("n3",)), "l1": ((), ("n1", "n2")), "lone": ((), ("n4",)),
                "bad": (("ghost",), ())}
    inv = Inventory(nodes=tuple(node(n) for n in ("n1", "n2", "n3", "n4", "n5")),
                    switches=switches)
    topo = topology_from_inventory(inv)
    assert [r.name for r in topo.roots] == ["top", "lone", "bad"]
    top = topo.roots[0]
    assert [c.name for c in top.children] == ["l1", "top/nodes"]
    assert topo.leaf_of["n3"].name == "top/nodes"
    assert "n5" not in topo.leaf_of and "n5" in topo.hosts  # under no switch: never placed
    assert topo.roots[2].hosts == () and topo.roots[2].height == 0


def test_a_cycle_in_the_switches_does_not_hang() -> None:
    switches = {"a": (("b",), ()), "b": (("a",), ("n1",))}
    topo = topology_from_inventory(Inventory(nodes=(node("n1"),), switches=switches))
    assert "n1" in topo.leaf_of


def labelled(name: str, block: str | None, rack: str | None, cpu: str = "8") -> LabelledNode:
    labels = {HOSTNAME_LABEL: name}
    if block is not None:
        labels["cloud.provider.com/topology-block"] = block
    if rack is not None:
        labels["cloud.provider.com/topology-rack"] = rack
    return LabelledNode(host_from_kubernetes(name, {"cpu": cpu, "memory": "16Gi", "pods": "110"}),
                        labels)


KUEUE_LEVELS = ["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack",
                HOSTNAME_LABEL]


def test_kubernetes_labels_as_kueue_levels() -> None:
    nodes = [labelled("n3", "b2", "r1"), labelled("n1", "b1", "r1"), labelled("n2", "b1", "r2"),
             labelled("n4", "b1", "r1"), labelled("stray", None, "r9")]
    topo = topology_from_node_labels(nodes, KUEUE_LEVELS)
    assert topo.levels == tuple(KUEUE_LEVELS[:2]) and topo.host_level == HOSTNAME_LABEL
    assert topo.spanning
    assert [d.path for d in topo.domains] == [("b1",), ("b1", "r1"), ("b1", "r2"), ("b2",),
                                              ("b2", "r1")]
    assert topo.domains[1].hosts == ("n1", "n4")
    # Two racks named r1 under different blocks are different domains.
    assert topo.leaf_of["n3"] is not topo.leaf_of["n1"]
    assert "stray" not in topo.leaf_of
    assert topo.hosts["n1"].cpu_millis == 8000 and topo.hosts["n1"].free_slots == 110


def test_kubernetes_levels_without_hostname_put_hosts_under_the_lowest_level() -> None:
    topo = topology_from_node_labels([labelled("n1", "b1", "r1")], KUEUE_LEVELS[:2])
    assert topo.host_level == "host" and topo.leaf_of["n1"].name == "r1"
    with pytest.raises(ValueError):
        topology_from_node_labels([], [])
    with pytest.raises(ValueError):
        topology_from_node_labels([], ["a", "a"])


def test_host_from_kubernetes_is_allocatable_minus_requested() -> None:
    h = host_from_kubernetes("n", {"cpu": "7910m", "memory": "31Gi", "nvidia.com/gpu": "8",
                                   "pods": "110"},
                             {"cpu": "2500m", "memory": "1Gi", "nvidia.com/gpu": 2},
                             running_pods=10)
    assert (h.cpu_millis, h.free_cpu_millis) == (7910, 5410)
    assert (h.memory_mb, h.free_memory_mb) == (31 * 1024, 30 * 1024)
    assert (h.gpus, h.free_gpus, h.free_slots) == (8, 6, 100)
    cordoned = host_from_kubernetes("n", {"cpu": "4", "pods": "10"}, unschedulable=True)
    assert not cordoned.usable and cordoned.free_cpu_millis == 0 and cordoned.free_slots == 0


@pytest.mark.parametrize(("text", "millis"), [("2", 2000), ("500m", 500), ("0.25", 250),
                                               ("1.5", 1500), (3, 3000), ("1k", 1_000_000)])
def test_cpu_quantities(text: str | int, millis: int) -> None:
    assert cpu_millis(text) == millis


@pytest.mark.parametrize(("text", "mb"), [("1Gi", 1024), ("512Mi", 512), ("1G", 954),
                                           ("1000000", 1), ("1.5Gi", 1536)])
def test_memory_quantities(text: str, mb: int) -> None:
    assert memory_mb(text) == mb


def test_malformed_quantity() -> None:
    with pytest.raises(ValueError):
        cpu_millis("two")


def test_with_hosts_replaces_by_name_and_keeps_the_tree() -> None:
    topo = topology_from_inventory(Inventory(nodes=(node("n1"),), switches={"s": ((), ("n1",))}))
    after = topo.with_hosts([Host("n1", 2000, 0)])
    assert after.roots is topo.roots and after.hosts["n1"].free_cpu_millis == 0
    assert topo.hosts["n1"].free_cpu_millis == 2000
