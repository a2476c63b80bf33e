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


@dataclass(frozen=True)
class Inventory:
    """Nodes and the switch tree above them (leaf switch -> nodes, parent -> children)."""

    nodes: tuple[NodeInfo, ...]
    #: switch name -> (child switches, nodes directly under it)
    switches: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
