"""Slurm topologies as ``scontrol`` prints them: topology/block (23.11+) read into the
same tree as switches, and the per-partition topologies of Slurm 25.05+."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bridge.nodes import Inventory
from bridge.placement import PlacementRequest, tree_best_fit
from bridge.topology import topology_from_inventory
from slurm_adapter.topology import Partitions, parse_partitions, parse_topology
from tests.unit.builders import inventory

#: ``scontrol show topology blocks`` on the 26.05 bed (block_sizes 1, 2, 4).
BLOCKS_2605 = """\
BlockName=b1 BlockIndex=0 Nodes=node1 BlockSize=1
BlockName=b2 BlockIndex=1 Nodes=node2 BlockSize=1
BlockName=b3 BlockIndex=2 Nodes=node3 BlockSize=1
BlockName=b4 BlockIndex=3 Nodes=node4 BlockSize=1
AggregatedBlock=b[1-2] BlockIndex=4 Nodes=node[1-2] BlockSize=2
AggregatedBlock=b[3-4] BlockIndex=6 Nodes=node[3-4] BlockSize=2
AggregatedBlock=b[1-4] BlockIndex=5 Nodes=node[1-4] BlockSize=4
"""

#: ``scontrol show partition -o`` on the 26.05 bed (fields shortened).
PARTITIONS_2605 = """\
PartitionName=debug AllowGroups=ALL Default=YES QoS=N/A Nodes=sid[1-4] State=UP
PartitionName=blocks AllowGroups=ALL Default=NO Nodes=sid[1-4] Topology=blocks State=UP
"""


def test_blocks_become_a_tree_of_aggregates() -> None:
    assert parse_topology(BLOCKS_2605) == {
        "b1": ((), ("node1",)), "b2": ((), ("node2",)),
        "b3": ((), ("node3",)), "b4": ((), ("node4",)),
        "b[1-2]": (("b1", "b2"), ()), "b[3-4]": (("b3", "b4"), ()),
        "b[1-4]": (("b[1-2]", "b[3-4]"), ()),
    }


def test_an_aggregate_skipping_a_size_holds_the_base_blocks() -> None:
    text = ("BlockName=r1 BlockIndex=0 Nodes=n[1-2] BlockSize=2\n"
            "BlockName=r2 BlockIndex=1 Nodes=n[3-4] BlockSize=2\n"
            "BlockName=r3 BlockIndex=2 Nodes=n[5-6] BlockSize=2\n"
            "BlockName=r4 BlockIndex=3 Nodes=n[7-8] BlockSize=2\n"
            "AggregatedBlock=r[1-4] BlockIndex=4 Nodes=n[1-8] BlockSize=8\n")
    tree = parse_topology(text)
    assert tree["r[1-4]"] == (("r1", "r2", "r3", "r4"), ())
    assert tree["r3"] == ((), ("n5", "n6"))


def test_blocks_without_aggregates_are_separate_roots() -> None:
    text = ("BlockName=b1 BlockIndex=0 Nodes=node[1-2] BlockSize=2\n"
            "BlockName=b2 BlockIndex=1 Nodes=node[3-4] BlockSize=2\n")
    topo = topology_from_inventory(replace(inventory(), switches=parse_topology(text)))
    assert [r.name for r in topo.roots] == ["b1", "b2"]
    # Slurm keeps such a job pending rather than spread it over blocks it cannot join.
    assert not tree_best_fit(topo, PlacementRequest(count=4)).fits


def test_a_job_is_placed_in_the_smallest_block_that_holds_it() -> None:
    busy = inventory(busy=("node1",))
    topo = topology_from_inventory(replace(busy, switches=parse_topology(BLOCKS_2605)))
    placed = tree_best_fit(topo, PlacementRequest(count=2))
    assert placed.fits and placed.hosts == ("node3", "node4")
    assert placed.leaf_domains == ("b3", "b4") and placed.score_text() == "leaf:2,level1:1,level2:1"


def test_partitions_name_their_own_topology_and_the_default() -> None:
    assert parse_partitions(PARTITIONS_2605) == Partitions(topology={"blocks": "blocks"},
                                                           default="debug")
    # 22.05 … 24.11 print no Topology=
    assert parse_partitions("PartitionName=debug Default=YES Nodes=n[1-4]\n") == Partitions(
        topology={}, default="debug")


def test_a_job_sees_its_partitions_topology() -> None:
    blocks = parse_topology(BLOCKS_2605)
    inv: Inventory = replace(inventory(), partition_switches={"blocks": blocks},
                             default_partition="debug")
    assert inv.switches_for("blocks") is blocks
    assert inv.switches_for("blocks,debug") is blocks  # the first of a list
    assert inv.switches_for("debug") is inv.switches
    assert inv.switches_for(None) is inv.switches
    # A default partition with its own topology is what a job without -p sees.
    assert replace(inv, default_partition="blocks").switches_for(None) is blocks
    assert [r.name for r in topology_from_inventory(inv, "blocks").roots] == ["b[1-4]"]
    assert [r.name for r in topology_from_inventory(inv).roots] == ["spine"]


def test_an_empty_block_name_does_not_hide_a_switch_tree() -> None:
    text = "SwitchName=s1 Nodes=node[1-2]\nBlockName= Nodes=\n"
    assert parse_topology(text) == {"s1": ((), ("node1", "node2"))}


def test_an_unreadable_partition_topology_is_refused_not_flat() -> None:
    inv = replace(inventory(), partition_switches={"gone": None})
    assert inv.switches_for("gone") is None
    with pytest.raises(ValueError, match="gone"):
        topology_from_inventory(inv, "gone")
