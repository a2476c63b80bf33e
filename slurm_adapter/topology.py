"""A Slurm cluster's topology, from ``scontrol show topology`` and ``show partition``.

``scontrol show topology`` (and topology.conf) write one unit a line. A switch tree
(topology/tree)::

    SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]
    SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-4] Switches=leaf[1-2]

blocks (topology/block, 23.11+), base blocks first, then the aggregated blocks that
``BlockSizes`` enforces, named by the hostlist of their base blocks::

    BlockName=b1 BlockIndex=0 Nodes=node[1-2] BlockSize=2
    BlockName=b2 BlockIndex=1 Nodes=node[3-4] BlockSize=2
    AggregatedBlock=b[1-2] BlockIndex=2 Nodes=node[1-4] BlockSize=4

:func:`parse_topology` gives both as ``unit -> (child units, nodes directly under
it)`` (the shape of :attr:`bridge.nodes.Inventory.switches`), so placement reads
blocks as the same kind of tree as switches: a base block is a leaf; an aggregated
block is the parent of the largest smaller aggregates (or base blocks) inside it.
``scontrol`` lists under an upper switch every node below it; those reached through
a child are removed, so each node sits under exactly its leaf. Comments (``#``) and
unknown keys are ignored; a malformed hostlist raises
:class:`slurm_adapter.hostlist.HostlistError`.

Slurm 25.05+ may define several topologies (topology.yaml) and give a partition its
own (``Topology=NAME`` in ``scontrol show partition -o``):
:func:`parse_partitions` reads which partition uses which, and which is the default.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_adapter import hostlist

__all__ = ["Partitions", "parse_partitions", "parse_topology"]

Tree = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]


def _fields(line: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep:
            fields[key.lower()] = value
    return fields


def _lines(text: str) -> list[dict[str, str]]:
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            found.append(_fields(line))
    return found


def parse_topology(text: str) -> Tree:
    """Unit name -> (child unit names, node names directly under it): switches of a
    tree, or the base and aggregated blocks of a block topology."""
    lines = _lines(text)
    if any(f.get("blockname") or f.get("aggregatedblock") for f in lines):
        return _blocks(lines)
    raw: dict[str, tuple[list[str], list[str]]] = {}
    for fields in lines:
        name = fields.get("switchname")
        if not name:
            continue
        children = hostlist.expand(fields.get("switches", ""))
        nodes = hostlist.expand(fields.get("nodes", ""))
        raw[name] = (children, nodes)

    def below(switch: str, seen: frozenset[str]) -> set[str]:
        children, nodes = raw.get(switch, ([], []))
        found = set(nodes)
        for child in children:
            if child not in seen:
                found |= below(child, seen | {child})
        return found

    tree: Tree = {}
    for name, (children, nodes) in raw.items():
        through_children: set[str] = set()
        for child in children:
            through_children |= below(child, frozenset({name, child}))
        direct = tuple(n for n in nodes if n not in through_children)
        tree[name] = (tuple(children), direct)
    return tree


def _blocks(lines: list[dict[str, str]]) -> Tree:
    """Base blocks hold their nodes; each aggregated block holds the largest units
    (smaller aggregates, else base blocks) below it, in Slurm's order. Slurm nests
    aggregates (each is a run of whole smaller ones), so the largest units inside one
    are the topmost units of its nodes so far: linear in nodes per level."""
    tree: Tree = {}
    top: dict[str, str] = {}  # node -> the largest unit seen so far holding it
    aggregated: list[tuple[str, list[str]]] = []
    for fields in lines:
        if fields.get("blockname"):
            held = tuple(hostlist.expand(fields.get("nodes", "")))
            tree[fields["blockname"]] = ((), held)
            for node in held:
                top.setdefault(node, fields["blockname"])
        elif fields.get("aggregatedblock"):
            aggregated.append((fields["aggregatedblock"],
                               hostlist.expand(fields.get("nodes", ""))))
    # Smallest first, so that each aggregate finds the ones just below it.
    for name, nodes in sorted(aggregated, key=lambda a: len(a[1])):
        if name in tree:  # a unit of the same name already: not a second one
            continue
        children = dict.fromkeys(top[n] for n in nodes if n in top)
        tree[name] = (tuple(children), ())
        for node in nodes:
            if node in top:
                top[node] = name
    return tree


@dataclass(frozen=True)
class Partitions:
    """Which partition uses which named topology (Slurm 25.05+ ``Topology=``), and the
    default partition (``Default=YES``; None when none is)."""

    topology: dict[str, str]
    default: str | None


def parse_partitions(text: str) -> Partitions:
    """``scontrol show partition -o`` (one partition a line)."""
    topology: dict[str, str] = {}
    default: str | None = None
    for fields in _lines(text):
        name = fields.get("partitionname")
        if not name:
            continue
        if fields.get("topology"):
            topology[name] = fields["topology"]
        if fields.get("default", "").upper() == "YES" and default is None:
            default = name
    return Partitions(topology=topology, default=default)
