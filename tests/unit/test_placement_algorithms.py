"""bench/placement_algorithms.py: the emulations the benchmark compares the engine's
placement with (Slurm topology/block, Kueue TAS, first fit), on hand-worked cases from
their documentation, and the properties every placement algorithm keeps (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.placement_algorithms import block_placement, first_fit, kueue_tas
from bridge.backend import Inventory, NodeInfo
from bridge.placement import PlacementRequest, tree_best_fit
from bridge.topology import (
    HOSTNAME_LABEL,
    Host,
    LabelledNode,
    Topology,
    topology_from_inventory,
    topology_from_node_labels,
)
from tests.unit.test_placement import (
    GUIDE_1,
    PROPERTY,
    TUX8,
    Algorithm,
    Switches,
    check_sound,
    cluster,
    inventories,
    requests,
    two,
)

# --- Slurm topology/block --------------------------------------------------------------
# topology.yaml(5), "Block definitions" example: block_sizes [4, 16], blocks b1..b4 of
# node[01-16]; "Successive BlockSizes must be a power of two larger than the prior values".

BLOCKS: Switches = {f"b{i}": ((), tuple(f"node{n:02d}" for n in range(4 * i - 3, 4 * i + 1)))
                    for i in range(1, 5)}
NODE16 = [f"node{n:02d}" for n in range(1, 17)]


def test_block_placement_manpage_example() -> None:
    topo = topology_from_inventory(Inventory(
        nodes=tuple(NodeInfo(n, "IDLE", 2, 2) for n in NODE16), switches=BLOCKS))
    # A 4-node job fits one base block.
    p = block_placement(topo, two(4), [4, 16])
    assert p.hosts == tuple(NODE16[:4]) and p.leaf_domains == ("b1",)
    # 8 nodes: the 16-node aggregate (b1..b4), fewest base blocks: two.
    p = block_placement(topo, two(8), [4, 16])
    assert p.hosts == tuple(NODE16[:8]) and p.score == (("leaf", 2), ("block16", 1))
    # 20 nodes > 16 in all: does not fit.
    assert not block_placement(topo, two(20), [4, 16]).fits
    with pytest.raises(ValueError):
        block_placement(topo, two(2), [4, 12])


def test_block_placement_best_fit_and_default_sizes() -> None:
    topo = cluster(BLOCKS, NODE16, busy=("node01",))
    # b1 has 3 free: the tightest base block for 3 nodes is b1, for 4 it is b2.
    assert block_placement(topo, two(3)).leaf_domains == ("b1",)
    assert block_placement(topo, two(4)).leaf_domains == ("b2",)
    # Default sizes 4, 8, 16: 6 nodes go in an aligned pair of base blocks (b1+b2 has 7
    # free, b3+b4 8): the tighter pair, largest base block first.
    p = block_placement(topo, two(6))
    assert p.leaf_domains == ("b1", "b2") and p.score[1] == ("block8", 1)
    assert p.hosts == ("node02", "node03", "node05", "node06", "node07", "node08")


# --- Kueue TAS -------------------------------------------------------------------------
# https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/ and the algorithm of
# pkg/cache/tas_flavor_snapshot.go (findTopologyAssignment: phase 1 counts, phase 2a the
# level, BestFit = the smallest domain that fits, phase 2b greedy descent).

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
KUEUE_LEVELS = [BLOCK, RACK, HOSTNAME_LABEL]


def kueue_cluster(free_cpu: dict[str, int] | None = None) -> Topology:
    """b1: r1 = x1,x2; r2 = x3,x4,x5. b2: r3 = x6..x9. One CPU free per host."""
    racks = {"x1": ("b1", "r1"), "x2": ("b1", "r1"), "x3": ("b1", "r2"), "x4": ("b1", "r2"),
             "x5": ("b1", "r2"), "x6": ("b2", "r3"), "x7": ("b2", "r3"), "x8": ("b2", "r3"),
             "x9": ("b2", "r3")}
    free_cpu = free_cpu or {}
    nodes = [LabelledNode(Host(name, 4000, free_cpu.get(name, 1) * 1000, free_slots=110),
                          {BLOCK: b, RACK: r, HOSTNAME_LABEL: name})
             for name, (b, r) in racks.items()]
    return topology_from_node_labels(nodes, KUEUE_LEVELS)


def pods(n: int, pack: bool = False) -> PlacementRequest:
    return PlacementRequest(count=n, cpu_millis=1000, one_per_host=not pack)


@pytest.mark.parametrize(("count", "level", "mode", "hosts"), [
    # Racks hold 2, 3, 4: BestFit takes the smallest rack that fits.
    (3, RACK, "required", "x3 x4 x5"),
    (2, RACK, "required", "x1 x2"),
    (4, RACK, "required", "x6 x7 x8 x9"),
    # Blocks hold 5 and 4: 4 pods go to the smaller block, b2.
    (4, BLOCK, "required", "x6 x7 x8 x9"),
    # No rack holds 5; preferred goes up to blocks: b1 (5), then racks of b1, largest first.
    (5, RACK, "preferred", "x1 x2 x3 x4 x5"),
    # 7 pods: no block holds them: blocks b1 (5) + b2 (4); going down, racks are minimised:
    # r3 (4) then r2 (3) -- r1 is not used although b1 was chosen.
    (7, RACK, "preferred", "x3 x4 x5 x6 x7 x8 x9"),
    # One pod per host at the hostname level, ties broken by level values.
    (1, HOSTNAME_LABEL, "required", "x1"),
    (3, HOSTNAME_LABEL, "unconstrained", "x1 x2 x3"),
])
def test_kueue_tas_cases(count: int, level: str, mode: str, hosts: str) -> None:
    p = kueue_tas(kueue_cluster(), pods(count), level, mode)  # type: ignore[arg-type]
    assert p.fits, p.reason
    assert " ".join(p.hosts) == hosts


def test_kueue_required_fails_with_kueues_message() -> None:
    p = kueue_tas(kueue_cluster(), pods(5, pack=True), RACK, "required")
    assert not p.fits and p.reason == f"topology {RACK!r} allows to fit only 4 out of 5 pod(s)"
    assert "no requested topology level" in kueue_tas(kueue_cluster(), pods(1), "zone").reason


def test_kueue_packs_pods_on_the_tightest_host() -> None:
    topo = kueue_cluster({"x6": 2, "x7": 4})
    # x7 holds 4 pods, x6 2: 3 pods go to the smallest host that holds them all, x7.
    p = kueue_tas(topo, pods(3, pack=True), HOSTNAME_LABEL, "required")
    assert p.hosts == ("x7",) and p.units == (3,)
    p = kueue_tas(topo, pods(6, pack=True), RACK, "required")
    assert p.hosts == ("x6", "x7") and p.units == (2, 4)


# --- the baseline ----------------------------------------------------------------------


def test_first_fit_ignores_the_tree() -> None:
    topo = cluster(GUIDE_1, TUX8, busy=("tux0",))
    assert first_fit(topo, two(2)).hosts == ("tux1", "tux2")
    assert tree_best_fit(topo, two(2)).hosts == ("tux2", "tux3")


# --- properties ------------------------------------------------------------------------

ALGORITHMS: dict[str, Algorithm] = {
    "block": block_placement,
    "kueue-required-leaf": lambda t, r: kueue_tas(t, r, "leaf", "required"),
    "kueue-preferred-leaf": lambda t, r: kueue_tas(t, r, "leaf", "preferred"),
    "kueue-unconstrained-node": lambda t, r: kueue_tas(t, r, "node", "unconstrained"),
    "first_fit": first_fit,
}


@PROPERTY
@given(inventories(), requests, st.sampled_from(sorted(ALGORITHMS)))
def test_placements_are_sound_and_deterministic(inv: Inventory, request: PlacementRequest,
                                                name: str) -> None:
    algorithm = ALGORITHMS[name]
    topo = topology_from_inventory(inv)
    p = algorithm(topo, request)
    check_sound(topo, request, p)
    # Same input, same answer -- also from a topology built again from the same inventory.
    assert algorithm(topo, request) == p
    assert algorithm(topology_from_inventory(inv), request) == p


@PROPERTY
@given(inventories(), requests, st.sampled_from(["leaf", "level1"]))
def test_kueue_required_stays_in_one_domain(inv: Inventory, request: PlacementRequest,
                                            level: str) -> None:
    topo = topology_from_inventory(inv)
    p = kueue_tas(topo, request, level, "required")
    if p.fits:
        used = {d.name for h in p.hosts for d in topo.ancestors(topo.leaf_of[h])
                if d.level == level}
        assert len(used) == 1
