"""Slurm node names to Kubernetes node names, by an admin's rule.

* ``same`` (the default): a node has one name in both worlds;
* ``label:KEY``: the Kubernetes node whose label ``KEY`` is the Slurm name (e.g. a
  site's ``slurm.example.org/node-name``);
* a table (``{slurm name: Kubernetes name}``): listed names only.

A Slurm node without a Kubernetes node is an error naming it: the job cannot bind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class UnmappedNode(ValueError):
    """A Slurm node the rule finds no Kubernetes node for."""


@dataclass(frozen=True)
class NodeMap:
    """How Slurm names become Kubernetes names (see the module docstring)."""

    rule: str = "same"
    table: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, rule: str, table: Mapping[str, str] | None = None) -> NodeMap:
        """From the settings ``node_map`` (``same``, ``label:KEY`` or ``table``) and
        ``node_table``; ValueError naming what is wrong."""
        if rule == "table":
            if not table:
                raise ValueError("node_map = \"table\" needs a non-empty node_table")
            return cls("table", dict(table))
        if rule == "same" or (rule.startswith("label:") and len(rule) > len("label:")):
            if table:
                raise ValueError(f"node_table is only read with node_map = \"table\", "
                                 f"not {rule!r}")
            return cls(rule)
        raise ValueError(f"node_map must be \"same\", \"label:KEY\" or \"table\", not {rule!r}")

    def to_kubernetes(self, slurm_nodes: Iterable[str],
                      k8s_nodes: Iterable[Mapping[str, Any]] = ()) -> list[str]:
        """The Kubernetes node of each Slurm node, in order. ``k8s_nodes`` (Node objects,
        as listed) are read only by the ``label:`` rule."""
        names = list(slurm_nodes)
        if self.rule == "same":
            return names
        if self.rule == "table":
            found = {n: self.table.get(n) for n in names}
        else:
            key = self.rule.removeprefix("label:")
            by_label: dict[str, str] = {}
            for node in k8s_nodes:
                meta = node.get("metadata") or {}
                value = (meta.get("labels") or {}).get(key)
                if value and meta.get("name"):
                    by_label.setdefault(str(value), str(meta["name"]))
            found = {n: by_label.get(n) for n in names}
        missing = sorted(n for n, k in found.items() if not k)
        if missing:
            raise UnmappedNode(f"no Kubernetes node for Slurm node(s) {', '.join(missing)} "
                               f"(node_map = {self.rule!r})")
        return [str(found[n]) for n in names]
