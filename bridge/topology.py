"""One topology model for every world: a tree of domains above hosts with free capacity.

A :class:`Topology` is what the placement algorithms (:mod:`bridge.placement`) read:

* :class:`Host` — one machine with its total and free capacity (CPU in millicores,
  memory in MiB, GPUs, free slots) and whether it takes new work at all;
* :class:`Domain` — a network or physical grouping (Slurm switch, Kueue block or rack,
  a Slurm topology/block block). A domain holds either child domains or hosts; its
  ``height`` is 0 when it holds hosts and ``1 + max(child heights)`` otherwise (Slurm's
  switch ``Level``), its ``level`` is the level's name (``leaf``, ``level1`` for Slurm;
  the label key for Kubernetes);
* the roots, in the order the world lists them (that order breaks ties, so the same
  input always gives the same placement).

Everything here is a pure function of its arguments and every value is frozen, except
a topology's free-capacity memo (:class:`Memo`, :mod:`bridge.placement_capacity`), which
remembers answers, never changes one, and moves to the topology
:meth:`Topology.with_hosts` makes.

Builders:

* :func:`topology_from_inventory` — a back end's :class:`bridge.nodes.Inventory`
  (Slurm: switch tree or blocks from ``scontrol show topology`` — the partition's
  own topology where it has one — + node free capacity; an aggregated block is the
  parent of the blocks it joins, so ``leaf`` is a base block there);
* :func:`topology_from_node_labels` — Kubernetes nodes and the label keys of the
  levels, as a Kueue ``Topology`` names them (``cloud.provider.com/topology-block``,
  ``cloud.provider.com/topology-rack``, ``kubernetes.io/hostname``), with
  :func:`host_from_kubernetes` turning allocatable minus requested into a :class:`Host`.

Contracts of the builders:

* A host whose state is down, drained, failing, not responding, powered down, unknown
  … (:data:`UNUSABLE_STATES`) is kept with ``usable=False``: no algorithm places on it.
* Slurm: a host under no switch while the cluster has switches is outside the tree
  (Slurm does not place jobs there either); without any switch, every host sits under
  one synthetic domain ``cluster`` (a flat cluster). Jobs may not span roots
  (``spanning=False``): Slurm never places a job across switches without a common
  parent.
* Kubernetes: a node lacking one of the level labels is outside the tree (Kueue TAS
  ignores it); roots may be spanned (``spanning=True``), as Kueue does when a
  ``preferred`` level cannot hold a workload.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from bridge.hostmap import ChunkedMap

if TYPE_CHECKING:
    from bridge.nodes import Inventory, NodeInfo

__all__ = [
    "FLAT_ROOT",
    "HOSTNAME_LABEL",
    "HOST_LEVEL",
    "UNUSABLE_STATES",
    "Domain",
    "Host",
    "LabelledNode",
    "Topology",
    "cpu_millis",
    "host_from_kubernetes",
    "host_from_node",
    "memory_bytes",
    "memory_mb",
    "topology_from_inventory",
    "topology_from_node_labels",
]

#: Name of the host level when the world has no name for it.
HOST_LEVEL = "host"
#: The Kubernetes label that names a node (Kueue's lowest level, when used).
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The synthetic root of a cluster without switches.
FLAT_ROOT = "cluster"
#: Slurm node states/flags under which a node takes no new work.
UNUSABLE_STATES = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "UNKNOWN",
    "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN",
    "POWERING_UP", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID",
    "INVALID_REG", "NOT_READY", "UNSCHEDULABLE",
})


@dataclass(frozen=True)
class Host:
    """One machine: total and free capacity, and whether it takes work at all.

    ``free_slots`` is how many more job units (Kubernetes pods) it accepts; ``None``
    means no such limit (Slurm nodes are limited by CPUs, memory and GPUs only).
    """

    name: str
    cpu_millis: int = 0
    free_cpu_millis: int = 0
    memory_mb: int = 0
    free_memory_mb: int = 0
    gpus: int = 0
    free_gpus: int = 0
    free_slots: int | None = None
    usable: bool = True
    partitions: frozenset[str] = frozenset()
    features: frozenset[str] = frozenset()

    @property
    def idle(self) -> bool:
        """Nothing of it is in use (an ``--exclusive`` job may have it)."""
        return (self.usable and self.free_cpu_millis >= self.cpu_millis
                and self.free_memory_mb >= self.memory_mb and self.free_gpus >= self.gpus)


@dataclass(frozen=True, eq=False)
class Domain:
    """A grouping of hosts (switch, block, rack). Identity is the object (``eq=False``):
    two domains with one name under different parents are different domains."""

    name: str
    level: str
    height: int
    #: Names from the root down to this domain (its Kueue "level values").
    path: tuple[str, ...]
    children: tuple[Domain, ...] = ()
    hosts: tuple[str, ...] = ()

    def walk(self) -> Iterable[Domain]:
        """This domain and every domain below it, parents before children."""
        stack = [self]
        while stack:
            d = stack.pop()
            yield d
            stack.extend(reversed(d.children))


class _Shape:
    """What follows from the tree alone (not from free capacity): computed once, shared
    by the copies :meth:`Topology.with_hosts` makes."""

    def __init__(self) -> None:
        self.roots: tuple[Domain, ...] | None = None
        self.domains: tuple[Domain, ...] = ()
        self.order: dict[str, int] = {}
        self.parent: dict[int, Domain] = {}
        self.leaf_of: dict[str, Domain] = {}
        self.leaves: tuple[Domain, ...] = ()
        self.position: dict[int, int] = {}

    def compute(self, roots: tuple[Domain, ...]) -> None:
        self.domains = tuple(d for root in roots for d in root.walk())
        self.order = {h: i for i, h in enumerate(h for d in self.domains for h in d.hosts)}
        self.parent = {id(c): d for d in self.domains for c in d.children}
        self.leaf_of = {h: d for d in self.domains for h in d.hosts}
        self.leaves = tuple(d for d in self.domains if d.hosts)
        self.position = {id(d): i for i, d in enumerate(self.domains)}
        self.roots = roots


class Memo:
    """What :mod:`bridge.placement_capacity` remembers about one topology's free
    capacity (``data``, its own), and the hosts changed since it was last brought up
    to date (``changed``). :meth:`Topology.with_hosts` hands it on to the new
    topology, and the old one starts again from nothing: a lineage of topologies
    keeps one memo, at its newest member."""

    __slots__ = ("chains", "changed", "data")

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}
        self.changed: set[str] = set()
        #: id(leaf domain) -> the ids of it and its ancestors (from the tree only).
        self.chains: dict[int, tuple[int, ...]] = {}


@dataclass(frozen=True)
class Topology:
    """A forest of domains over hosts (see the module docstring)."""

    roots: tuple[Domain, ...]
    hosts: Mapping[str, Host] = field(hash=False)
    #: Names of the domain levels, top first (the host level is :attr:`host_level`).
    levels: tuple[str, ...] = ()
    host_level: str = HOST_LEVEL
    #: May one job use hosts under several roots?
    spanning: bool = False

    # -- derived from the tree, computed once and shared by with_hosts() copies ----

    _shape: _Shape = field(default_factory=lambda: _Shape(), compare=False, repr=False,
                           hash=False)

    #: Not an init field: a copy made any other way than :meth:`with_hosts`
    #: (``dataclasses.replace``) starts with a memo of its own.
    _memo: Memo = field(default_factory=Memo, init=False, compare=False, repr=False,
                        hash=False)

    def memo(self) -> Memo:
        """This topology's free-capacity memo (for :mod:`bridge.placement_capacity`)."""
        return self._memo

    def _derived(self) -> _Shape:
        shape = self._shape
        if shape.roots is not self.roots:
            shape.compute(self.roots)
        return shape

    @property
    def domains(self) -> tuple[Domain, ...]:
        """Every domain, roots first then depth-first in world order."""
        return self._derived().domains

    @property
    def order(self) -> Mapping[str, int]:
        """Host name -> its position in tree order (the tie-breaker everywhere)."""
        return self._derived().order

    @property
    def parent(self) -> Mapping[int, Domain]:
        """``id(domain)`` -> its parent domain (roots have none)."""
        return self._derived().parent

    @property
    def leaf_of(self) -> Mapping[str, Domain]:
        """Host name -> the domain that holds it."""
        return self._derived().leaf_of

    @property
    def leaves(self) -> tuple[Domain, ...]:
        """Domains that hold hosts, in tree order (Slurm's leaf switches)."""
        return self._derived().leaves

    @property
    def position(self) -> Mapping[int, int]:
        """``id(domain)`` -> its position in :attr:`domains` (the tie-breaker)."""
        return self._derived().position

    def ancestors(self, domain: Domain) -> list[Domain]:
        """``domain`` and its ancestors up to its root."""
        chain = [domain]
        while id(chain[-1]) in self.parent:
            chain.append(self.parent[id(chain[-1])])
        return chain

    def with_hosts(self, updated: Iterable[Host]) -> Topology:
        """The same tree with some hosts replaced (by name). The free-capacity memo
        (:class:`Memo`) moves to the new topology, which is the one the next placement
        of a pass reads; this one starts again from nothing (its answers stay right)."""
        changes = {h.name: h for h in updated}
        names = set(changes)
        base = self.hosts if isinstance(self.hosts, ChunkedMap) else ChunkedMap(self.hosts)
        hosts = base.replaced(changes.items())
        memo, old = Memo(), self._memo
        memo.data, memo.chains = old.data, old.chains
        memo.changed = old.changed | names if old.data else set()
        old.data, old.changed = {}, set()
        new = replace(self, hosts=hosts)
        object.__setattr__(new, "_memo", memo)
        return new


# --- quantities ------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_FACTORS = {None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
            "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
            "Pi": 2.0**50, "Ei": 2.0**60}


def _quantity(value: str | int | float) -> float:
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"invalid quantity {value!r}")
    return float(m.group(1)) * _FACTORS[m.group(2)]


def cpu_millis(value: str | int | float) -> int:
    """A Kubernetes CPU quantity in millicores (``"2"`` -> 2000, ``"500m"`` -> 500),
    rounded up (a request must never be under-counted). Raises ValueError if malformed."""
    return math.ceil(round(_quantity(value) * 1000, 6))


def memory_mb(value: str | int | float) -> int:
    """A Kubernetes memory quantity in MiB (``"1Gi"`` -> 1024, ``"1G"`` -> 954), rounded
    up. Raises ValueError if malformed."""
    return math.ceil(round(_quantity(value) / 2.0**20, 6))


def memory_bytes(value: str | int | float) -> int:
    """A Kubernetes memory quantity in bytes (``"16Ki"`` -> 16384), rounded up. Raises
    ValueError if malformed."""
    return math.ceil(round(_quantity(value), 6))


# --- Slurm (any Inventory) -------------------------------------------------------------


def _usable(state: str) -> bool:
    return not ({s.strip().upper() for s in state.replace("|", "+").split("+")}
                & UNUSABLE_STATES)


def host_from_node(node: NodeInfo) -> Host:
    """A :class:`Host` for one inventory node (CPUs become millicores)."""
    usable = _usable(node.state)
    return Host(
        name=node.name,
        cpu_millis=node.cpus * 1000,
        free_cpu_millis=max(node.free_cpus, 0) * 1000 if usable else 0,
        memory_mb=node.memory_mb,
        free_memory_mb=max(node.free_memory_mb, 0) if usable else 0,
        gpus=node.gpus,
        free_gpus=max(node.free_gpus, 0) if usable else 0,
        usable=usable,
        partitions=frozenset(node.partitions),
        features=frozenset(node.features),
    )


def _level_name(height: int) -> str:
    return "leaf" if height == 0 else f"level{height}"


def topology_from_inventory(inventory: Inventory, partition: str | None = None) -> Topology:
    """The topology of a back end's inventory (see the module docstring), as a job in
    ``partition`` sees it (:meth:`bridge.nodes.Inventory.switches_for`; ValueError when
    that partition's own topology could not be read).

    The units map switch -> (child switches, nodes directly under it), in
    the order ``topology.conf`` lists them. A switch with both child switches and nodes
    gets its nodes in a synthetic leaf ``<switch>/nodes``; a child named but not
    defined is ignored, and so is a cycle. Leaf switches are at level ``leaf``, their
    parents at ``level1``, ``level2`` … (Slurm's switch ``Level``).
    """
    hosts = {n.name: host_from_node(n) for n in inventory.nodes}
    switches = inventory.switches_for(partition)
    if switches is None:
        raise ValueError(f"the topology of partition {partition!r} could not be read")
    if not switches:
        root = Domain(FLAT_ROOT, "leaf", 0, (FLAT_ROOT,), (), tuple(hosts))
        return Topology(roots=(root,), hosts=ChunkedMap(hosts), levels=("leaf",),
                        host_level="node", spanning=False)
    named_children = {c for children, _ in switches.values() for c in children
                      if c in switches}
    roots = [s for s in switches if s not in named_children] or [next(iter(switches))]
    placed: set[str] = set()

    def build(name: str, path: tuple[str, ...], seen: frozenset[str]) -> Domain:
        children_names, node_names = switches[name]
        kids = [c for c in children_names if c in switches and c not in seen]
        mine = tuple(n for n in node_names if n in hosts and n not in placed)
        placed.update(mine)
        path = (*path, name)
        built = [build(c, path, seen | {c}) for c in kids]
        if built and mine:
            built.append(Domain(f"{name}/nodes", "leaf", 0, (*path, f"{name}/nodes"), (),
                                mine))
            mine = ()
        height = 1 + max(c.height for c in built) if built else 0
        return Domain(name, _level_name(height), height, path, tuple(built), mine)

    forest = tuple(build(r, (), frozenset({r})) for r in roots)
    heights = sorted({d.height for root in forest for d in root.walk()}, reverse=True)
    return Topology(roots=forest, hosts=ChunkedMap(hosts),
                    levels=tuple(_level_name(h) for h in heights), host_level="node",
                    spanning=False)


# --- Kubernetes node labels ------------------------------------------------------------


@dataclass(frozen=True)
class LabelledNode:
    """A Kubernetes node: its capacity as a :class:`Host` and its labels."""

    host: Host
    labels: Mapping[str, str] = field(hash=False)


def host_from_kubernetes(name: str, allocatable: Mapping[str, str | int | float],
                         requested: Mapping[str, str | int | float] | None = None, *,
                         ready: bool = True, unschedulable: bool = False,
                         running_pods: int = 0,
                         gpu_resource: str = "nvidia.com/gpu") -> Host:
    """A :class:`Host` from a node's ``status.allocatable`` minus what its pods request
    (as Kueue TAS counts free capacity). A node that is not Ready or is cordoned is not
    usable. Raises ValueError for a malformed quantity."""
    requested = requested or {}

    def amount(res: Mapping[str, str | int | float], key: str) -> int:
        raw = res.get(key)
        if raw is None:
            return 0
        if key == "cpu":
            return cpu_millis(raw)
        if key == "memory":
            return memory_mb(raw)
        return math.ceil(_quantity(raw))

    cpu, mem, gpus = (amount(allocatable, k) for k in ("cpu", "memory", gpu_resource))
    pods = allocatable.get("pods")
    usable = ready and not unschedulable
    free_slots = None if pods is None else max(int(_quantity(pods)) - running_pods, 0)
    return Host(
        name=name,
        cpu_millis=cpu,
        free_cpu_millis=max(cpu - amount(requested, "cpu"), 0) if usable else 0,
        memory_mb=mem,
        free_memory_mb=max(mem - amount(requested, "memory"), 0) if usable else 0,
        gpus=gpus,
        free_gpus=max(gpus - amount(requested, gpu_resource), 0) if usable else 0,
        free_slots=(free_slots if usable else 0) if free_slots is not None else None,
        usable=usable,
    )


def topology_from_node_labels(nodes: Sequence[LabelledNode],
                              level_keys: Sequence[str]) -> Topology:
    """The topology Kueue TAS builds from node labels.

    ``level_keys`` are the label keys of the levels, top first (a Kueue ``Topology``'s
    ``spec.levels``). When the last is ``kubernetes.io/hostname`` it names the host
    level; otherwise hosts sit under the lowest listed level. Domains are ordered by
    their label values (Kueue sorts ties by level values); a node missing a level label
    is outside the tree. Raises ValueError for no levels or repeated keys.
    """
    keys = list(level_keys)
    if not keys or len(set(keys)) != len(keys):
        raise ValueError(f"level keys must be distinct and non-empty, got {keys!r}")
    host_level = HOST_LEVEL
    if keys[-1] == HOSTNAME_LABEL:
        host_level = keys.pop()
    hosts = {n.host.name: n.host for n in nodes}
    if not keys:  # only the hostname level: every host is its own domain's content
        root = Domain(FLAT_ROOT, FLAT_ROOT, 0, (FLAT_ROOT,), (), tuple(sorted(hosts)))
        return Topology((root,), ChunkedMap(hosts), (), host_level, spanning=True)
    tree: dict[tuple[str, ...], list[str]] = {}
    for n in nodes:
        values = tuple(n.labels.get(k) for k in keys)
        if any(v is None or v == "" for v in values):
            continue
        tree.setdefault(tuple(str(v) for v in values), []).append(n.host.name)

    def build(prefix: tuple[str, ...]) -> Domain:
        depth = len(prefix)
        if depth == len(keys):
            names = sorted(tree[prefix])
            return Domain(prefix[-1], keys[-1], 0, prefix, (), tuple(names))
        below = sorted({p[depth] for p in tree if p[:depth] == prefix})
        kids = tuple(build((*prefix, v)) for v in below)
        return Domain(prefix[-1], keys[depth - 1], len(keys) - depth, prefix, kids, ())

    roots = tuple(build((v,)) for v in sorted({p[0] for p in tree}))
    return Topology(roots, ChunkedMap(hosts), tuple(keys), host_level, spanning=True)
