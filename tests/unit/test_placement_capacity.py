"""bridge.placement_capacity and bridge.hostmap: the remembered free capacity answers
what a full scan answers, after any sequence of placed jobs and freed hosts, on the
newest topology and on the older ones it came from; ChunkedMap is a dict that copies
cheaply (hypothesis, against a plain dict)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import Inventory, NodeInfo
from bridge.hostmap import CHUNK, ChunkedMap
from bridge.placement import PlacementRequest, tree_best_fit, within_switches
from bridge.placement_capacity import MAX_SHAPES, capacity, domain_capacities, fitting_units
from bridge.topology import Topology, topology_from_inventory
from tests.unit.test_placement import PROPERTY, inventories


def scanned(topo: Topology, request: PlacementRequest) -> tuple[dict[str, int], dict[int, int]]:
    units = fitting_units(topo, request)
    return units, domain_capacities(topo, units)


def fresh(topo: Topology) -> Topology:
    """The same world without anything remembered."""
    return Topology(topo.roots, dict(topo.hosts), topo.levels, topo.host_level, topo.spanning)


def check(topo: Topology, request: PlacementRequest) -> None:
    units, caps = capacity(topo, request)
    want_units, want_caps = scanned(topo, request)
    assert list(units.items()) == list(want_units.items())  # tree order too
    assert dict(caps) == want_caps


# Requests as the engine makes them, restrictions included.
restricted = st.builds(
    PlacementRequest, count=st.integers(1, 14), cpu_millis=st.sampled_from([0, 1000, 3000]),
    memory_mb=st.sampled_from([0, 500]), gpus=st.sampled_from([0, 0, 1]),
    exclusive=st.booleans(), one_per_host=st.booleans(),
    partition=st.sampled_from([None, None, "p1"]),
    features=st.sampled_from([frozenset(), frozenset({"ib"})]),
    excluded=st.sampled_from([frozenset(), frozenset({"n1", "n3"})]))

# A step: place a job (take its hosts), book one placed elsewhere (its hosts taken
# without asking this topology: booked_in), free a host (a job ended), ask without
# placing, or go on from an older topology (a pass that starts again from the base).
steps = st.lists(st.one_of(st.tuples(st.just("place"), restricted),
                           st.tuples(st.just("book"), restricted),
                           st.tuples(st.just("free"), st.integers(0, 60)),
                           st.tuples(st.just("ask"), restricted),
                           st.tuples(st.just("older"), st.integers(0, 60))),
                 min_size=1, max_size=14)


def with_labels(topo: Topology, seed: int) -> Topology:
    """Some hosts in partition p1 and some with feature ib (a fresh topology)."""
    names = list(topo.order)
    hosts = dict(topo.hosts)
    for i, name in enumerate(names):
        if (i + seed) % 3 == 0:
            hosts[name] = replace(hosts[name], partitions=frozenset({"p1"}))
        if (i + seed) % 2 == 0:
            hosts[name] = replace(hosts[name], features=frozenset({"ib"}))
    return Topology(topo.roots, hosts, topo.levels, topo.host_level, topo.spanning)


@PROPERTY
@given(inventories(), st.lists(restricted, min_size=1, max_size=4), steps, st.integers(0, 2),
       st.booleans())
def test_remembered_capacity_is_the_full_scan_after_any_changes(
        inv: Inventory, asked: list[PlacementRequest],
        changes: list[tuple[str, PlacementRequest | int]], seed: int, every: bool) -> None:
    topo = with_labels(topology_from_inventory(inv), seed)
    older: list[Topology] = [topo]
    names = list(topo.order)
    for kind, arg in changes:
        if every:  # else changes pile up between questions
            for request in asked:
                check(topo, request)
        if kind == "ask":
            assert isinstance(arg, PlacementRequest)
            check(topo, arg)
        elif kind == "place":
            assert isinstance(arg, PlacementRequest)
            p = tree_best_fit(topo, arg)
            assert p == tree_best_fit(fresh(topo), arg)
            if p.fits:
                older.append(topo)
                topo = p.apply(topo, arg)
        elif kind == "book":
            assert isinstance(arg, PlacementRequest)
            p = tree_best_fit(fresh(topo), arg)
            if p.fits:
                older.append(topo)
                topo = p.apply(topo, arg)
        elif kind == "free":
            assert isinstance(arg, int)
            h = topo.hosts[names[arg % len(names)]]
            older.append(topo)
            topo = topo.with_hosts([replace(h, free_cpu_millis=h.cpu_millis,
                                            free_memory_mb=h.memory_mb, free_gpus=h.gpus)])
        else:
            assert isinstance(arg, int)
            topo = older[arg % len(older)]
    for request in asked:
        check(topo, request)
        assert within_switches(topo, request, 1) == within_switches(fresh(topo), request, 1)
    for old in older:  # a topology that handed its memo on still answers for itself
        for request in asked:
            check(old, request)


def test_a_copy_made_by_replace_does_not_share_the_memo() -> None:
    inv = Inventory(nodes=(NodeInfo("n1", "IDLE", 4, 4, 1000, 1000),), switches={})
    topo = topology_from_inventory(inv)
    request = PlacementRequest(count=1, cpu_millis=1000)
    check(topo, request)
    busy = replace(topo, hosts={"n1": replace(topo.hosts["n1"], free_cpu_millis=0)})
    check(busy, request)
    assert not tree_best_fit(busy, request).fits


def test_the_least_recently_used_shape_goes_first() -> None:
    topo = topology_from_inventory(Inventory(nodes=(), switches={}))
    shapes = [PlacementRequest(count=1, cpu_millis=cpu) for cpu in range(MAX_SHAPES)]
    for request in shapes:
        capacity(topo, request)
    capacity(topo, shapes[0])  # used again: now the most recent
    capacity(topo, PlacementRequest(count=1, cpu_millis=999))
    kept = {r.cpu_millis for r in topo.memo().data}
    assert 0 in kept and 1 not in kept and 999 in kept


def test_many_shapes_are_remembered_up_to_the_bound() -> None:
    inv = Inventory(nodes=(), switches={})
    topo = topology_from_inventory(inv)
    for cpu in range(MAX_SHAPES + 3):
        capacity(topo, PlacementRequest(count=1, cpu_millis=cpu))
    assert len(topo.memo().data) == MAX_SHAPES


def test_a_node_count_shares_its_shape_and_a_pod_count_does_not() -> None:
    topo = topology_from_inventory(Inventory(nodes=(), switches={}))
    capacity(topo, PlacementRequest(count=3))
    capacity(topo, PlacementRequest(count=7))
    assert len(topo.memo().data) == 1
    capacity(topo, PlacementRequest(count=3, one_per_host=False))
    capacity(topo, PlacementRequest(count=7, one_per_host=False))
    assert len(topo.memo().data) == 3


# --- ChunkedMap ---------------------------------------------------------------------------

keys = st.text("abcdefgh", min_size=1, max_size=3)


@given(st.dictionaries(keys, st.integers(), max_size=3 * CHUNK),
       st.lists(st.lists(st.tuples(keys, st.integers()), max_size=8), max_size=6))
def test_chunked_map_is_a_dict_that_copies_cheaply(
        base: dict[str, int], rounds: list[list[tuple[str, int]]]) -> None:
    m = ChunkedMap(base)
    model = dict(base)
    for changes in rounds:
        before, before_model = m, dict(model)
        m = m.replaced(changes)
        model.update(changes)
        assert dict(before.items()) == before_model  # the original is unchanged
        assert list(before) == list(before_model)
        assert list(m.items()) == list(model.items())  # iteration in first-given order
        assert len(m) == len(model) and m == model
        for k in "abcz":
            assert (k in m) == (k in model)
            assert m.get(k) == model.get(k)


def test_chunked_map_has_no_setters_and_says_what_is_missing() -> None:
    m = ChunkedMap({"a": 1})
    with pytest.raises(KeyError):
        m["b"]
    with pytest.raises(TypeError):
        m["a"] = 2  # type: ignore[index]
