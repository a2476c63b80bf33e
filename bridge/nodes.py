"""What a back end reports about its nodes: :class:`NodeInfo` and :class:`Inventory`.

A leaf of the core: it imports nothing of ``bridge``, so the placement engine
(:mod:`bridge.topology`, :mod:`bridge.placement`) reads inventories without importing
the back-end seam (:mod:`bridge.backend`, which re-exports both names), and the seam
may use placement's types without an import circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Inventory", "NodeInfo"]


@dataclass(frozen=True)
class NodeInfo:
    """A node of the back end's inventory, with its free capacity."""

    name: str
    state: str
    cpus: int
    free_cpus: int
    memory_mb: int = 0
    free_memory_mb: int = 0
    gpus: int = 0
    free_gpus: int = 0
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()


#: unit name -> (child units, nodes directly under it): a switch tree, or blocks
Units = Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]


@dataclass(frozen=True)
class Inventory:
    """Nodes and the topology above them (leaf unit -> nodes, parent -> children).

    ``switches`` is the cluster's default topology. Where a partition has a topology
    of its own (Slurm 25.05+ ``Topology=``), ``partition_switches`` holds it, and
    ``default_partition`` names the partition a job without one lands in.
    """

    nodes: tuple[NodeInfo, ...]
    #: switch (or block) name -> (child switches, nodes directly under it)
    switches: Units = field(default_factory=dict)
    #: partition -> its own topology, where it is not the default one; None where it
    #: could not be read (its jobs are not placed by the bridge: the back end chooses)
    partition_switches: Mapping[str, Units | None] = field(default_factory=dict)
    default_partition: str | None = None

    def switches_for(self, partition: str | None) -> Units | None:
        """The topology a job in ``partition`` is placed in (None: the default
        partition), or None when that partition's own topology could not be read. Of
        a list (``-p a,b``) the first partition counts."""
        name = partition.split(",", 1)[0].strip() if partition else self.default_partition
        if name is None:
            return self.switches
        return self.partition_switches.get(name, self.switches)
