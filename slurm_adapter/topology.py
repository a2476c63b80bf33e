"""The switch tree of a Slurm cluster, from ``scontrol show topology`` or topology.conf.

Both write one switch a line::

    SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]
    SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-4] Switches=leaf[1-2]

:func:`parse_topology` gives ``switch -> (child switches, nodes directly under
it)`` (the shape of :attr:`bridge.backend.Inventory.switches`). ``scontrol``
lists under an upper switch every node below it; those reached through a child
switch are removed, so each node sits under exactly its leaf. Comments (``#``)
and unknown keys are ignored; a malformed hostlist raises
:class:`slurm_adapter.hostlist.HostlistError`.
"""

from __future__ import annotations

from slurm_adapter import hostlist

__all__ = ["parse_topology"]


def parse_topology(text: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Switch name -> (child switch names, node names directly under it)."""
    raw: dict[str, tuple[list[str], list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key.lower()] = value
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

    tree: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for name, (children, nodes) in raw.items():
        through_children: set[str] = set()
        for child in children:
            through_children |= below(child, frozenset({name, child}))
        direct = tuple(n for n in nodes if n not in through_children)
        tree[name] = (tuple(children), direct)
    return tree
