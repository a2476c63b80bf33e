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


class _Inventory:
    def __init__(self, nodes: list[NodeInfo]):
        self.nodes = nodes


class _Slurm:
    def __init__(self, names: list[str]):
        self.names = names

    async def inventory(self) -> _Inventory:
        return _Inventory([node(n, "IDLE") for n in self.names])


class _K8s:
    def __init__(self, nodes: list[dict[str, object]]):
        self.nodes = nodes
        self.kube = None  # no taint changes here: never called

    def known_nodes(self) -> list[dict[str, object]]:
        return self.nodes


def k8s_node(name: str, pool: bool = True) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {"p": "true"} if pool else {}},
            "spec": {"taints": []}}


def test_the_pools_nodes_are_this_slurm_clusters_pool_nodes_and_unknown_before_a_listing(
        ) -> None:
    """What the allocation cleanup may touch (pool_adapter/sweeper.py): pool-labelled
    Kubernetes nodes that map to a node of this Slurm cluster; unknown (None) while the
    node watch has listed nothing, not "none" (which would let no label be removed)."""
    import asyncio

    from pool_adapter.nodemap import NodeMap
    from pool_adapter.nodestate import NodeStates

    k8s = _K8s([])
    states = NodeStates("pool", _Slurm(["node1", "node2"]), k8s,  # type: ignore[arg-type]
                        NodeMap.parse("same"), "p", 30)
    asyncio.run(states.sync_once())
    assert states.pool_nodes is None
    k8s.nodes = [k8s_node("node1"), k8s_node("node2", pool=False), k8s_node("node9"),
                 k8s_node("kwok-1", pool=False)]
    asyncio.run(states.sync_once())
    assert states.pool_nodes == frozenset({"node1"})  # node9: another Slurm cluster's
    k8s.nodes = [k8s_node("kwok-1", pool=False)]
    asyncio.run(states.sync_once())
    assert states.pool_nodes == frozenset()
