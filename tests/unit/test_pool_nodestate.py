"""pool_adapter.nodestate: which taint a pool node carries for its Slurm state."""

from __future__ import annotations

from bridge.nodes import NodeInfo
from pool_adapter.nodestate import TAINT_KEY, changes, unusable_state, wanted_taints

POOL = {"key": "pool", "value": "true", "effect": "NoSchedule"}


def node(name: str, state: str) -> NodeInfo:
    return NodeInfo(name=name, state=state, cpus=2, free_cpus=2)


def test_the_first_state_that_takes_a_node_out_of_use_names_it() -> None:
    assert unusable_state(node("n", "IDLE")) is None
    assert unusable_state(node("n", "MIXED")) is None
    assert unusable_state(node("n", "IDLE+DRAIN")) == "DRAIN"
    assert unusable_state(node("n", "DOWN+NOT_RESPONDING")) == "DOWN"


def test_only_the_bridges_taint_changes_and_only_when_it_must() -> None:
    assert wanted_taints([POOL], None) is None
    drained = wanted_taints([POOL], "DRAIN")
    assert drained == [POOL, {"key": TAINT_KEY, "value": "DRAIN", "effect": "NoSchedule"}]
    assert wanted_taints(drained, "DRAIN") is None
    assert wanted_taints(drained, "DOWN") == [
        POOL, {"key": TAINT_KEY, "value": "DOWN", "effect": "NoSchedule"}]
    assert wanted_taints(drained, None) == [POOL]


def test_changes_cover_mapped_pool_nodes_only() -> None:
    k8s = {"k1": {"spec": {"taints": [POOL]}}, "k2": {"spec": {}}}
    out = changes([node("n1", "IDLE+DRAIN"), node("n2", "IDLE"), node("n3", "DOWN")],
                  {"n1": "k1", "n2": "k2", "n3": "k3"}, k8s)
    assert out == {"k1": [POOL, {"key": TAINT_KEY, "value": "DRAIN", "effect": "NoSchedule"}]}
