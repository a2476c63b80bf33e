"""flux_adapter.resources: RFC 20 R documents to hosts, and the inventory; and the
hostfile mpi-launch writes from the same R (the two readers must agree)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_adapter.resources import (
    RError,
    inventory_nodes,
    nodes_of,
    parse_r,
    placement_constraint,
    queues_of,
)
from mpi_launch.allocation import from_flux_r, parse_idset
from mpi_launch.hostfile import render_hostfile

R_DIR = Path(__file__).parent / "fixtures" / "flux" / "R"


def r_doc(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((R_DIR / f"{name}.json").read_text())
    return data


def test_rfc20_example1() -> None:
    ranks = parse_r(r_doc("rfc20-example1"))
    assert [(x.rank, x.host) for x in ranks] == [
        (19, "node186"), (20, "node187"), (21, "node188"), (22, "node189")]
    assert all(len(x.cores) == 48 and len(x.gpus) == 8 for x in ranks)


def test_rfc20_example2_mixed_entries_and_extra_keys() -> None:
    ranks = parse_r(r_doc("rfc20-example2"))
    assert [(x.host, len(x.cores), len(x.gpus)) for x in ranks] == [
        ("host0", 8, 1), ("host1", 8, 1), ("host2", 4, 0), ("host3", 4, 0)]


def test_properties_and_several_hostlists() -> None:
    ranks = parse_r(r_doc("properties"))
    assert [x.host for x in ranks] == ["node1", "node2", "node3", "node4", "gpu1", "gpu3"]
    assert [x.rank for x in ranks] == [0, 1, 2, 3, 4, 6]
    by_host = {x.host: x for x in ranks}
    assert by_host["node1"].properties == {"debug"}
    assert by_host["node3"].properties == {"batch"}
    assert by_host["gpu3"].properties == {"batch", "a100"}
    assert by_host["gpu1"].gpus == {0, 1}


def test_node_key_without_nodelist() -> None:
    assert nodes_of(r_doc("node-key")) == ("alpha", "beta")


def test_text_none_and_empty() -> None:
    text = (R_DIR / "job-2nodes.json").read_text()
    assert nodes_of(text) == ("node2", "node3")
    assert parse_r(None) == ()
    assert parse_r({"version": 1, "execution": {"R_lite": [], "nodelist": []}}) == ()


@pytest.mark.parametrize(("doc", "match"), [
    ("not json", "not JSON"),
    ([], "JSON object"),
    ({"version": 2, "execution": {}}, "version"),
    ({"version": 1}, "execution"),
    ({"version": 1, "execution": {"R_lite": {}}}, "must be a list"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0-1"}], "nodelist": ["a,b"]}},
     "children"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "x", "children": {"core": "0"}}]}},
     "rank"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}},
                                             {"rank": "0", "children": {"core": "1"}}],
                                  "nodelist": ["a"]}}, "twice"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": {"core": "0"}}],
                                  "nodelist": ["a"]}}, "names 1 hosts for 2 ranks"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}]}},
     "no nodelist"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                  "nodelist": ["n[1-"]}}, "bracket"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                  "nodelist": ["a"], "properties": {"p": "z"}}},
     "properties"),
])
def test_malformed(doc: Any, match: str) -> None:
    with pytest.raises(RError, match=match):
        parse_r(doc)
    assert nodes_of(doc) == ()


def test_inventory_from_sched_status() -> None:
    status = r_doc("sched-status")
    queues = {"debug": {"requires": ["debug"]}, "batch": {}, "gpu": {"requires": ["gpu"]}}
    nodes = {n.name: n for n in inventory_nodes(status["all"], status["allocated"],
                                                status["down"], queues=queues)}
    assert list(nodes) == ["node1", "node2", "node3", "node4", "gpu1"]
    n1, n2, n3, n4, g1 = (nodes[k] for k in nodes)
    assert (n1.state, n1.cpus, n1.free_cpus, n1.partitions, n1.features) == (
        "IDLE", 2, 2, ("batch", "debug"), ("debug",))
    assert (n2.state, n2.free_cpus) == ("ALLOCATED", 0)
    assert (n3.state, n3.free_cpus) == ("MIXED", 1)
    assert (n4.state, n4.free_cpus, n4.cpus) == ("DOWN", 0, 2)
    assert (g1.state, g1.cpus, g1.free_cpus, g1.gpus, g1.free_gpus, g1.partitions) == (
        "MIXED", 8, 4, 4, 2, ("batch", "gpu"))


def test_inventory_without_allocations_or_queues() -> None:
    nodes = inventory_nodes(r_doc("rfc20-example1"))
    n = nodes[0]
    assert (n.name, n.state, n.free_cpus, n.free_gpus, n.partitions) == (
        "node186", "IDLE", 48, 8, ())


def test_queues_of() -> None:
    queues = {"a": {"requires": ["x", "y"]}, "b": {"requires": ["x"]}, "c": {}, "d": "bad"}
    assert queues_of(frozenset({"x"}), queues) == ("b", "c", "d")
    assert queues_of(frozenset({"x", "y"}), queues) == ("a", "b", "c", "d")


# --- the hostfile mpi-launch writes from the same R --------------------------------------


@pytest.mark.parametrize(("name", "flavour", "nproc", "expected"), [
    ("rfc20-example1", "openmpi", None,
     "node186 slots=48\nnode187 slots=48\nnode188 slots=48\nnode189 slots=48\n"),
    ("rfc20-example1", "openmpi", 8,
     "node186 slots=8\nnode187 slots=8\nnode188 slots=8\nnode189 slots=8\n"),
    ("rfc20-example2", "mpich", None, "host0:8\nhost1:8\nhost2:4\nhost3:4\n"),
    ("job-2nodes", "openmpi", 2, "node2 slots=2\nnode3 slots=2\n"),
    ("properties", "intel", None, "node1:2\nnode2:2\nnode3:2\nnode4:2\ngpu1:4\ngpu3:4\n"),
])
def test_hostfile_from_r(name: str, flavour: str, nproc: int | None, expected: str) -> None:
    """mpi-launch (``--world flux``) reads R itself; its hosts, in rank order, are the ones
    the back end reports, and ``--nproc-per-node`` (which the back end always passes
    when cores per task exceed one) replaces the core counts."""
    doc = r_doc(name)
    alloc = from_flux_r(json.dumps(doc), job_id="f1", node_rank=0)
    if nproc is not None:
        alloc = alloc.with_slots(nproc)
    assert tuple(alloc.names) == nodes_of(doc)
    assert render_hostfile(flavour, alloc.hosts) == expected


def test_mpi_launch_finds_this_node_in_r() -> None:
    alloc = from_flux_r(r_doc("job-2nodes"), job_id="f1", hostname="node3.cluster",
                        proc_rank=3, local_rank=1)
    assert (alloc.node_rank, alloc.this_host.name, alloc.proc_rank) == (1, "node3", 3)


@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 8)), min_size=1, max_size=12),
       st.integers(0, 100))
def test_parse_r_matches_mpi_launch(shape: list[tuple[int, int]], first_rank: int) -> None:
    """For any R (one entry per rank, a bracketed nodelist), both readers agree on the
    hosts, their order, cores and GPUs."""
    r_lite = [{"rank": str(first_rank + i),
               "children": {"core": f"0-{cores - 1}", **({"gpu": f"0-{gpus - 1}"}
                                                          if gpus else {})}}
              for i, (cores, gpus) in enumerate(shape)]
    doc = {"version": 1, "execution": {
        "R_lite": r_lite, "nodelist": [f"n[{first_rank}-{first_rank + len(shape) - 1}]"]}}
    mine = parse_r(doc)
    theirs = from_flux_r(doc, job_id="f1", node_rank=0)
    assert [(x.host, len(x.cores), len(x.gpus)) for x in mine] == [
        (h.name, h.slots, h.gpus) for h in theirs.hosts]


def test_brokers_sharing_a_host_name_are_distinct_nodes() -> None:
    """``flux start --test-size=3``: three brokers on host "box". Placement must see three
    nodes (it indexes hosts by name), and a placement on them becomes their ranks."""
    r = {"version": 1, "execution": {
        "R_lite": [{"rank": "0-2", "children": {"core": "0-1"}},
                   {"rank": "3", "children": {"core": "0-3"}}],
        "nodelist": ["box,box,box,other"]}}
    nodes = inventory_nodes(r)
    assert [n.name for n in nodes] == ["box@0", "box@1", "box@2", "other"]
    assert [n.cpus for n in nodes] == [2, 2, 2, 4]
    assert placement_constraint(["box@2", "box@0"]) == {"ranks": ["0,2"]}
    assert placement_constraint(["other"]) == {"hostlist": ["other"]}


@given(st.sets(st.integers(0, 300), min_size=1))
def test_placement_ranks_round_trip(ranks: set[int]) -> None:
    got = placement_constraint([f"box@{r}" for r in ranks])
    assert set(parse_idset(got["ranks"][0], variable="ranks")) == ranks  # type: ignore[index]
