"""bridge.placement_capacity and bridge.hostmap: the remembered free capacity answers
what a full scan answers, after any sequence of placed jobs and freed hosts, on the
newest topology and on the older ones it came from; ChunkedMap is a dict that copies
cheaply (hypothesis, against a plain dict)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import Inventory
from bridge.hostmap import CHUNK, ChunkedMap
from bridge.placement import PlacementRequest, tree_best_fit, within_switches
from bridge.placement_capacity import MAX_SHAPES, capacity, domain_capacities, fitting_units
from bridge.topology import Topology, topology_from_inventory
from tests.unit.test_placement import PROPERTY, inventories, requests


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


# A step: place a job (take its hosts), or free a host (a job ended).
steps = st.lists(st.one_of(st.tuples(st.just("place"), requests),
                           st.tuples(st.just("free"), st.integers(0, 60))),
                 min_size=1, max_size=12)


@PROPERTY
@given(inventories(), st.lists(requests, min_size=1, max_size=4), steps)
def test_remembered_capacity_is_the_full_scan_after_any_changes(
        inv: Inventory, asked: list[PlacementRequest],
        changes: list[tuple[str, PlacementRequest | int]]) -> None:
    topo = topology_from_inventory(inv)
    older: list[Topology] = []
    names = list(topo.order)
    for kind, arg in changes:
        for request in asked:  # remembered shapes, carried through the changes
            check(topo, request)
        older.append(topo)
        if kind == "place":
            assert isinstance(arg, PlacementRequest)
            p = tree_best_fit(topo, arg)
            assert p == tree_best_fit(fresh(topo), arg)
            if p.fits:
                topo = p.apply(topo, arg)
        else:
            assert isinstance(arg, int)
            h = topo.hosts[names[arg % len(names)]]
            topo = topo.with_hosts([replace(h, free_cpu_millis=h.cpu_millis,
                                            free_memory_mb=h.memory_mb, free_gpus=h.gpus)])
    for request in asked:
        check(topo, request)
        assert within_switches(topo, request, 1) == within_switches(fresh(topo), request, 1)
    for old in older:  # a topology that handed its memo on still answers for itself
        for request in asked:
            check(old, request)


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
