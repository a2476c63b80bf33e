"""bridge.placement and bridge.placement_request: hand-worked cases from the Slurm
documentation, and properties every algorithm keeps (hypothesis). The emulations only
the benchmark uses are checked in test_placement_algorithms.py, with the helpers here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.backend import Inventory, NodeInfo
from bridge.model import load_trainjob
from bridge.placement import (
    Placement,
    PlacementRequest,
    fitting_units,
    tree_best_fit,
    within_switches,
)
from bridge.placement_request import features_of, request_from_job
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.topology import (
    Host,
    Topology,
    topology_from_inventory,
)

Switches = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]


def cluster(switches: Switches, nodes: Sequence[str], busy: Sequence[str] = (),
            cpus: int = 2) -> Topology:
    """Nodes with ``cpus`` CPUs each; ``busy`` ones fully allocated."""
    return topology_from_inventory(Inventory(
        nodes=tuple(NodeInfo(n, "ALLOCATED" if n in busy else "IDLE", cpus,
                             0 if n in busy else cpus, 4000, 4000) for n in nodes),
        switches=switches))


def two(n: int) -> PlacementRequest:
    return PlacementRequest(count=n)


# --- Slurm topology/tree ---------------------------------------------------------------
# https://slurm.schedmd.com/topology.html ("Hierarchical Networks"): "identify the lowest
# level switch in the hierarchy that can satisfy a job's request and then allocate
# resources on its underlying leaf switches using a best-fit algorithm".

# The Topology Guide's first example: eight nodes, every switch has two children.
GUIDE_1: Switches = {
    "s0": ((), ("tux0", "tux1")), "s1": ((), ("tux2", "tux3")),
    "s2": ((), ("tux4", "tux5")), "s3": ((), ("tux6", "tux7")),
    "s4": (("s0", "s1"), ()), "s5": (("s2", "s3"), ()), "s6": (("s4", "s5"), ()),
}
TUX8 = [f"tux{i}" for i in range(8)]
# The guide's second example, as it recommends writing it: four leaves of four, one top.
GUIDE_2: Switches = {
    "s0": ((), ("tux0", "tux1", "tux2", "tux3")), "s1": ((), ("tux4", "tux5", "tux6", "tux7")),
    "s2": ((), ("tux8", "tux9", "tux10", "tux11")),
    "s3": ((), ("tux12", "tux13", "tux14", "tux15")), "s4": (("s0", "s1", "s2", "s3"), ()),
}
TUX16 = [f"tux{i}" for i in range(16)]


@pytest.mark.parametrize(("busy", "count", "hosts", "leaves"), [
    # A 2-node job fits one leaf switch: the first (all equally tight).
    ((), 2, ("tux0", "tux1"), ("s0",)),
    # 3 nodes: the lowest switch holding 3 is s4 (a level-1 switch), not s6.
    ((), 3, ("tux0", "tux1", "tux2"), ("s0", "s1")),
    # tux0 busy: a whole free leaf (s1) is preferred to spanning, and s0 keeps its node.
    (("tux0",), 2, ("tux2", "tux3"), ("s1",)),
    # tux0 and tux2 busy: s0 and s1 hold one each; s2 (same level) holds both.
    (("tux0", "tux2"), 2, ("tux4", "tux5"), ("s2",)),
    # 1 node with tux0 busy: best fit is the tightest leaf, s0 (1 free), not s1 (2 free).
    (("tux0",), 1, ("tux1",), ("s0",)),
    # 5 nodes: s4 holds 4 only, the top switch s6 is needed; s4's leaves fill first.
    ((), 5, ("tux0", "tux1", "tux2", "tux3", "tux4"), ("s0", "s1", "s2")),
])
def test_guide_example_1(busy: tuple[str, ...], count: int, hosts: tuple[str, ...],
                         leaves: tuple[str, ...]) -> None:
    p = tree_best_fit(cluster(GUIDE_1, TUX8, busy), two(count))
    assert p.fits and p.hosts == hosts and p.leaf_domains == leaves


def test_guide_example_2_largest_leaf_first_then_the_tightest() -> None:
    topo = cluster(GUIDE_2, TUX16, busy=("tux1",))
    p = tree_best_fit(topo, two(6))
    # No leaf holds 6: the largest (s1, 4 free) first, then the tightest leaf that holds
    # the remaining 2: s0 with 3 free (not s2/s3 with 4).
    assert p.leaf_domains == ("s0", "s1")
    assert p.hosts == ("tux0", "tux2", "tux4", "tux5", "tux6", "tux7")
    assert p.score == (("leaf", 2), ("level1", 1))


def test_switches_constraint() -> None:
    topo = cluster(GUIDE_2, TUX16)
    one = within_switches(topo, two(6), 1)
    assert not one.fits and one.hosts == ()
    assert one.reason.startswith("does not fit within 1 leaf switch(es) now")
    assert "the fewest that hold it now: 2" in one.reason
    assert within_switches(topo, two(6), 2).leaf_domains == ("s0", "s1")
    assert within_switches(topo, two(4), 1).leaf_domains == ("s0",)


def test_switches_constraint_finds_fewer_leaves_than_plain_best_fit() -> None:
    # a: leaves of 2+2+2 (6), b: leaves 5+1 (6). Best fit takes a (tie, first) and uses
    # 3 leaves; --switches=2 must find b's 5+1.
    switches: Switches = {
        "a1": ((), ("n1", "n2")), "a2": ((), ("n3", "n4")), "a3": ((), ("n5", "n6")),
        "b1": ((), ("m1", "m2", "m3", "m4", "m5")), "b2": ((), ("m6",)),
        "a": (("a1", "a2", "a3"), ()), "b": (("b1", "b2"), ()), "top": (("a", "b"), ()),
    }
    nodes = [f"n{i}" for i in range(1, 7)] + [f"m{i}" for i in range(1, 7)]
    topo = cluster(switches, nodes)
    assert len(tree_best_fit(topo, two(6)).leaf_domains) == 3
    p = within_switches(topo, two(6), 2)
    assert p.fits and p.leaf_domains == ("b1", "b2")


def test_no_job_spans_switches_without_a_common_parent() -> None:
    switches: Switches = {"s0": ((), ("a", "b")), "s1": ((), ("c", "d"))}
    p = tree_best_fit(cluster(switches, "abcd"), two(3))
    assert not p.fits and "no job spans switches without a common parent" in p.reason


def test_the_test_bed() -> None:
    bed: Switches = {"leaf1": ((), ("node1", "node2")), "leaf2": ((), ("node3", "node4")),
                     "spine": (("leaf1", "leaf2"), ())}
    nodes = ["node1", "node2", "node3", "node4"]
    assert tree_best_fit(cluster(bed, nodes), two(2)).hosts == ("node1", "node2")
    busy = cluster(bed, nodes, busy=("node1", "node3"))
    p = tree_best_fit(busy, two(2))
    assert p.hosts == ("node2", "node4") and p.score_text() == "leaf:2,level1:1"
    assert not within_switches(busy, two(2), 1).fits


def test_best_fit_within_a_leaf_keeps_idle_and_gpu_hosts_free() -> None:
    inv = Inventory(nodes=(
        NodeInfo("gpu", "IDLE", 8, 8, 1000, 1000, gpus=4, free_gpus=4),
        NodeInfo("idle", "IDLE", 8, 8, 1000, 1000),
        NodeInfo("half", "MIXED", 8, 4, 1000, 1000),
    ), switches={"s": ((), ("gpu", "idle", "half"))})
    topo = topology_from_inventory(inv)
    assert tree_best_fit(topo, PlacementRequest(1, cpu_millis=2000)).hosts == ("half",)
    assert tree_best_fit(topo, PlacementRequest(2, cpu_millis=2000)).hosts == ("idle", "half")
    assert tree_best_fit(topo, PlacementRequest(1, gpus=1)).hosts == ("gpu",)
    assert tree_best_fit(topo, PlacementRequest(1, exclusive=True)).hosts == ("idle",)


# --- results, requests ----------------------------------------------------------------


def test_placement_json_round_trip() -> None:
    p = tree_best_fit(cluster(GUIDE_2, TUX16), two(6))
    assert Placement.from_dict(p.to_dict()) == p
    assert p.to_dict()["score"] == "leaf:2,level1:1"


@pytest.mark.parametrize(("constraint", "features"), [
    (None, frozenset()), ("ib", {"ib"}), ("ib&v100", {"ib", "v100"}), ("a,b", {"a", "b"}),
    ("a|b", None), ("[a*2&b]", None), ("a*2", None)])
def test_features_of(constraint: str | None, features: set[str] | None) -> None:
    assert features_of(constraint) == (None if features is None else frozenset(features))


def job_doc(**trainer: object) -> dict[str, object]:
    return {"metadata": {"name": "j"}, "spec": {"runtimeRef": {"name": "torch-distributed"},
                                                "trainer": {"command": ["x"], **trainer}}}


def test_request_from_job() -> None:
    job = load_trainjob(job_doc(numNodes=3, numProcPerNode=2))
    plan = RuntimeCatalog().resolve(job)
    r = request_from_job(job, plan, SchedulingOptions(cpus_per_task=2, exclusive=True,
                                                      partition="gpu", exclude="n[1-2]",
                                                      constraint="ib", gpus_per_node=1,
                                                      mem_per_node_mb=100))
    assert (r.count, r.cpu_millis, r.gpus, r.memory_mb) == (3, 4000, 1, 100)
    assert r.exclusive and r.partition == "gpu" and r.excluded == {"n1", "n2"}
    assert r.features == {"ib"}
    job = load_trainjob(job_doc(numNodes=2, resourcesPerNode={
        "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 2}}))
    r = request_from_job(job, RuntimeCatalog().resolve(job), SchedulingOptions())
    assert (r.count, r.cpu_millis, r.memory_mb, r.gpus) == (2, 500, 1024, 2)


def test_request_restrictions() -> None:
    host = Host("n1", 4000, 4000, 1000, 1000, partitions=frozenset({"debug"}),
                features=frozenset({"ib"}))
    assert PlacementRequest(1).units_on(host) == 1
    assert PlacementRequest(1, partition="gpu").units_on(host) == 0
    assert PlacementRequest(1, features=frozenset({"v100"})).units_on(host) == 0
    assert PlacementRequest(1, excluded=frozenset({"n1"})).units_on(host) == 0
    assert PlacementRequest(9, one_per_host=False).units_on(host) == 4
    assert PlacementRequest(9, one_per_host=False, memory_mb=300).units_on(host) == 3
    with pytest.raises(ValueError):
        PlacementRequest(0)


# --- properties ------------------------------------------------------------------------

STATES = ["IDLE", "IDLE", "IDLE", "MIXED", "ALLOCATED", "DOWN", "IDLE+DRAIN"]


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    """1-3 groups of 1-4 leaf switches of 1-5 nodes; maybe a top switch over the groups."""
    nodes: list[NodeInfo] = []
    switches: Switches = {}
    groups = draw(st.integers(1, 3))
    n = 0
    for g in range(groups):
        leaves = []
        for leaf in range(draw(st.integers(1, 4))):
            names = []
            for _ in range(draw(st.integers(1, 5))):
                n += 1
                cpus = draw(st.sampled_from([2, 4, 8]))
                gpus = draw(st.sampled_from([0, 0, 2]))
                nodes.append(NodeInfo(
                    f"n{n}", draw(st.sampled_from(STATES)), cpus, draw(st.integers(0, cpus)),
                    4000, draw(st.sampled_from([0, 1000, 4000])), gpus=gpus,
                    free_gpus=draw(st.integers(0, gpus))))
                names.append(f"n{n}")
            switches[f"g{g}l{leaf}"] = ((), tuple(names))
            leaves.append(f"g{g}l{leaf}")
        switches[f"g{g}"] = (tuple(leaves), ())
    if groups > 1 and draw(st.booleans()):
        switches["top"] = (tuple(f"g{g}" for g in range(groups)), ())
    return Inventory(nodes=tuple(nodes), switches=switches)


requests = st.builds(
    PlacementRequest, count=st.integers(1, 14), cpu_millis=st.sampled_from([0, 1000, 3000]),
    memory_mb=st.sampled_from([0, 500]), gpus=st.sampled_from([0, 0, 1]),
    exclusive=st.booleans(), one_per_host=st.booleans())

Algorithm = Callable[[Topology, PlacementRequest], Placement]
ALGORITHMS: dict[str, Algorithm] = {
    "tree": tree_best_fit,
    "switches1": lambda t, r: within_switches(t, r, 1),
    "switches2": lambda t, r: within_switches(t, r, 2),
}
PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def check_sound(topo: Topology, request: PlacementRequest, p: Placement) -> None:
    """Capacity, no double booking, all or nothing."""
    if not p.fits:
        assert p.hosts == () and p.units == () and p.reason
        return
    assert sum(p.units) == request.count
    assert len(set(p.hosts)) == len(p.hosts)
    for host, units in zip(p.hosts, p.units, strict=True):
        assert 1 <= units <= request.units_on(topo.hosts[host])
        assert topo.hosts[host].usable
        if request.one_per_host:
            assert units == 1
    after = p.apply(topo, request)
    for host in p.hosts:
        h = after.hosts[host]
        assert min(h.free_cpu_millis, h.free_memory_mb, h.free_gpus) >= 0


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
@given(inventories(), requests)
def test_tree_fits_exactly_when_one_top_switch_holds_the_job(inv: Inventory,
                                                             request: PlacementRequest) -> None:
    topo = topology_from_inventory(inv)
    p = tree_best_fit(topo, request)
    room = [sum(min(request.units_on(topo.hosts[h]), request.count)
                for d in root.walk() for h in d.hosts) for root in topo.roots]
    assert p.fits == (max(room) >= request.count)
    if p.fits:
        roots = {topo.ancestors(topo.leaf_of[h])[-1].name for h in p.hosts}
        assert len(roots) == 1
        # Fragmentation: if one leaf holds the job, exactly one leaf is used: the
        # tightest one that holds it.
        leaf_room = {leaf.name: sum(request.units_on(topo.hosts[h]) for h in leaf.hosts)
                     for leaf in topo.leaves}
        holding = [v for v in leaf_room.values() if v >= request.count]
        if holding:
            assert len(p.leaf_domains) == 1
            assert leaf_room[p.leaf_domains[0]] == min(holding)


@PROPERTY
@given(inventories(), requests, st.integers(1, 3))
def test_switches_limit(inv: Inventory, request: PlacementRequest, n: int) -> None:
    topo = topology_from_inventory(inv)
    p = within_switches(topo, request, n)
    plain = tree_best_fit(topo, request)
    if p.fits:
        assert len(p.leaf_domains) <= n
    else:
        assert "leaf switch" in p.reason
    if plain.fits and len(plain.leaf_domains) <= n:
        assert p == plain


@PROPERTY
@given(inventories(), st.lists(requests, min_size=1, max_size=6))
def test_a_batch_never_double_books(inv: Inventory, batch: list[PlacementRequest]) -> None:
    topo = topology_from_inventory(inv)
    start = topo
    taken: dict[str, int] = {}
    for request in batch:
        p = tree_best_fit(topo, request)
        check_sound(topo, request, p)
        if p.fits:
            topo = p.apply(topo, request)
            for h in p.hosts:
                taken[h] = taken.get(h, 0) + 1
    for host_name, after in topo.hosts.items():
        before = start.hosts[host_name]
        assert 0 <= after.free_cpu_millis <= before.free_cpu_millis
        assert 0 <= after.free_gpus <= before.free_gpus
        assert 0 <= after.free_memory_mb <= before.free_memory_mb


@PROPERTY
@given(inventories(), requests)
def test_the_fast_capacity_count_is_units_on(inv: Inventory, request: PlacementRequest) -> None:
    topo = topology_from_inventory(inv)
    expected = {h: n for h in topo.order if (n := request.units_on(topo.hosts[h])) > 0}
    assert fitting_units(topo, request) == expected
