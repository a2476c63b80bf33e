"""Topology-aware placement: pure functions ``(Topology, PlacementRequest) -> Placement``.

Every algorithm here

* is **pure** and **deterministic**: it reads its arguments only, changes nothing, and
  the same input gives the same output (ties are broken by the world's order of
  domains and hosts, :attr:`bridge.topology.Topology.order`);
* is **all-or-nothing** (gang semantics): the result holds exactly
  ``request.count`` units, or no host at all and a ``reason``;
* **never over-commits**: a host gets at most as many units as its free capacity holds
  (:meth:`PlacementRequest.units_on`), and appears once in the result;
* reports its **score**: the domains used at each level, leaf level first
  (:attr:`Placement.levels`).

The algorithms (docs/placement.md has worked examples):

* :func:`tree_best_fit` — Slurm ``topology/tree`` + ``select/cons_tres`` best fit;
  with ``max_leaf_domains`` it is ``--switches=N``;
* :func:`block_placement` — Slurm ``topology/block``;
* :func:`kueue_tas` — Kueue Topology Aware Scheduling (``required`` / ``preferred`` /
  ``unconstrained``, the default BestFit profile);
* :func:`first_fit` — the baseline that ignores the topology (benchmarks).

A *unit* is what the request counts: a node for Slurm (``one_per_host=True``: each
unit on its own host), a pod for Kueue (several pods may share a host when
``one_per_host=False``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import hostlist

from bridge.model import TrainJob
from bridge.runtimes import LaunchPlan
from bridge.scheduling import SchedulingOptions
from bridge.shape import resolve_shape
from bridge.topology import Domain, Host, Topology

__all__ = [
    "LevelUse",
    "Placement",
    "PlacementRequest",
    "block_placement",
    "features_of",
    "first_fit",
    "kueue_tas",
    "request_from_job",
    "tree_best_fit",
    "within_switches",
]


@dataclass(frozen=True)
class PlacementRequest:
    """What one job needs: ``count`` units, each with these resources.

    ``exclusive``: a unit needs a whole idle host (Slurm ``--exclusive``).
    ``partition``/``features``/``excluded`` restrict the hosts (a host with no
    partitions listed is in every partition).
    """

    count: int
    cpu_millis: int = 1000
    memory_mb: int = 0
    gpus: int = 0
    exclusive: bool = False
    one_per_host: bool = True
    partition: str | None = None
    features: frozenset[str] = frozenset()
    excluded: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")
        if min(self.cpu_millis, self.memory_mb, self.gpus) < 0:
            raise ValueError("resources per unit must not be negative")

    @property
    def unit(self) -> str:
        return "node" if self.one_per_host else "pod"

    def units_on(self, host: Host) -> int:
        """How many units fit on ``host`` now (0 if it may not be used). At most
        ``count``; at most 1 when ``one_per_host``."""
        if not host.usable or host.name in self.excluded:
            return 0
        if self.partition is not None and host.partitions and (
                self.partition not in host.partitions):
            return 0
        if not self.features <= host.features:
            return 0
        if host.free_slots is not None and host.free_slots <= 0:
            return 0
        if self.exclusive:
            enough = (host.cpu_millis >= self.cpu_millis and host.memory_mb >= self.memory_mb
                      and host.gpus >= self.gpus)
            return 1 if host.idle and enough else 0
        n = self.count
        if self.cpu_millis:
            n = min(n, host.free_cpu_millis // self.cpu_millis)
        if self.memory_mb:
            n = min(n, host.free_memory_mb // self.memory_mb)
        if self.gpus:
            n = min(n, host.free_gpus // self.gpus)
        if host.free_slots is not None:
            n = min(n, host.free_slots)
        if self.one_per_host:
            n = min(n, 1)
        return max(n, 0)

    def allocate(self, host: Host, units: int) -> Host:
        """``host`` after ``units`` of this request started on it."""
        if self.exclusive:
            return Host(**{**vars(host), "free_cpu_millis": 0, "free_memory_mb": 0,
                           "free_gpus": 0,
                           "free_slots": None if host.free_slots is None
                           else host.free_slots - units})
        return Host(**{
            **vars(host),
            "free_cpu_millis": host.free_cpu_millis - units * self.cpu_millis,
            "free_memory_mb": host.free_memory_mb - units * self.memory_mb,
            "free_gpus": host.free_gpus - units * self.gpus,
            "free_slots": None if host.free_slots is None else host.free_slots - units,
        })


@dataclass(frozen=True)
class LevelUse:
    """The domains of one level that a placement uses."""

    level: str
    domains: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    """The answer of an algorithm: the hosts and units per host, the domains used per
    level (leaf level first: the *score*; fewer is better), or why it does not fit."""

    algorithm: str
    requested: int
    hosts: tuple[str, ...] = ()
    units: tuple[int, ...] = ()
    levels: tuple[LevelUse, ...] = ()
    reason: str = ""

    @property
    def fits(self) -> bool:
        return bool(self.hosts) and sum(self.units) == self.requested

    @property
    def score(self) -> tuple[tuple[str, int], ...]:
        """``(level, number of domains used)``, leaf level first."""
        return tuple((u.level, len(u.domains)) for u in self.levels)

    @property
    def leaf_domains(self) -> tuple[str, ...]:
        """The lowest-level domains used (Slurm's leaf switches)."""
        return self.levels[0].domains if self.levels else ()

    def score_text(self) -> str:
        """``leaf:1,level1:1`` — the score as ``tshow`` prints it."""
        return ",".join(f"{level}:{n}" for level, n in self.score)

    def apply(self, topology: Topology, request: PlacementRequest) -> Topology:
        """``topology`` with this placement's units taken from its hosts (to place the
        next job of a batch without double-booking)."""
        return topology.with_hosts(request.allocate(topology.hosts[h], n)
                                   for h, n in zip(self.hosts, self.units, strict=True))

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "requested": self.requested,
                "hosts": list(self.hosts), "units": list(self.units),
                "levels": [{"level": u.level, "domains": list(u.domains)} for u in self.levels],
                "score": self.score_text(), "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        return cls(algorithm=str(data["algorithm"]), requested=int(data["requested"]),
                   hosts=tuple(data.get("hosts") or ()), units=tuple(data.get("units") or ()),
                   levels=tuple(LevelUse(str(u["level"]), tuple(u["domains"]))
                                for u in data.get("levels") or ()),
                   reason=str(data.get("reason") or ""))


# --- shared machinery ----------------------------------------------------------------

Units = dict[str, int]


def _units(topology: Topology, request: PlacementRequest) -> Units:
    """Host -> units that fit now, for hosts in the tree with room for at least one.

    The same as :meth:`PlacementRequest.units_on` for every host (a test checks it),
    written out because it runs for every host for every job."""
    if (request.exclusive or request.partition is not None or request.features
            or request.excluded):
        out: Units = {}
        for name in topology.order:
            n = request.units_on(topology.hosts[name])
            if n > 0:
                out[name] = n
        return out
    hosts = topology.hosts
    cpu, mem, gpus = request.cpu_millis, request.memory_mb, request.gpus
    cap = 1 if request.one_per_host else request.count
    out = {}
    for name in topology.order:
        h = hosts[name]
        if not h.usable:
            continue
        n = cap
        if cpu:
            n = min(n, h.free_cpu_millis // cpu)
        if mem:
            n = min(n, h.free_memory_mb // mem)
        if gpus:
            n = min(n, h.free_gpus // gpus)
        if h.free_slots is not None:
            n = min(n, h.free_slots)
        if n > 0:
            out[name] = n
    return out


def _capacities(topology: Topology, units: Units) -> dict[int, int]:
    """``id(domain)`` -> units that fit in the whole domain."""
    caps = dict.fromkeys(map(id, topology.domains), 0)
    leaf_of = topology.leaf_of
    for name, n in units.items():
        caps[id(leaf_of[name])] += n
    for d in reversed(topology.domains):  # children before parents
        if d.children:
            caps[id(d)] += sum(caps[id(c)] for c in d.children)
    return caps


def _index(topology: Topology) -> dict[int, int]:
    return {id(d): i for i, d in enumerate(topology.domains)}


def _tightness(topology: Topology, name: str) -> tuple[int, int, int, int]:
    """Sort key for hosts: the least free first (best fit), then tree order. GPUs
    first: a CPU job keeps off the GPU hosts while others will do."""
    h = topology.hosts[name]
    return (h.free_gpus, h.free_cpu_millis, h.free_memory_mb, topology.order[name])


def _take_hosts(topology: Topology, hosts: Iterable[str], need: int,
                units: Units) -> list[tuple[str, int]]:
    """``need`` units from ``hosts``, tightest hosts first (Slurm's node best fit)."""
    chosen: list[tuple[str, int]] = []
    for name in sorted((h for h in hosts if units.get(h, 0) > 0),
                       key=lambda h: _tightness(topology, h)):
        if need <= 0:
            break
        take = min(units[name], need)
        chosen.append((name, take))
        need -= take
    return chosen


def _levels(topology: Topology, hosts: Iterable[str]) -> tuple[LevelUse, ...]:
    """The domains holding ``hosts``, per level, leaf level first."""
    index = _index(topology)
    by_level: dict[str, dict[int, Domain]] = {}
    height: dict[str, int] = {}
    for h in hosts:
        leaf = topology.leaf_of.get(h)
        if leaf is None:
            continue
        for d in topology.ancestors(leaf):
            by_level.setdefault(d.level, {})[id(d)] = d
            height[d.level] = min(height.get(d.level, d.height), d.height)
    return tuple(
        LevelUse(level, tuple(d.name for d in sorted(ds.values(), key=lambda d: index[id(d)])))
        for level, ds in sorted(by_level.items(), key=lambda kv: height[kv[0]]))


def _result(topology: Topology, algorithm: str, request: PlacementRequest,
            chosen: Sequence[tuple[str, int]]) -> Placement:
    merged: dict[str, int] = {}
    for name, n in chosen:
        merged[name] = merged.get(name, 0) + n
    if sum(merged.values()) != request.count:  # defensive: never a partial gang
        return Placement(algorithm, request.count, reason="internal: partial placement")
    names = sorted(merged, key=lambda h: topology.order[h])
    return Placement(algorithm, request.count, tuple(names), tuple(merged[h] for h in names),
                     _levels(topology, names))


def _no_fit(algorithm: str, request: PlacementRequest, reason: str) -> Placement:
    return Placement(algorithm, request.count, reason=reason)


def _shortage(request: PlacementRequest, total: int) -> str:
    return (f"{request.count} {request.unit}(s) requested but only {total} fit on the "
            f"free hosts now")


# --- Slurm topology/tree ---------------------------------------------------------------


def tree_best_fit(topology: Topology, request: PlacementRequest, *,
                  max_leaf_domains: int | None = None) -> Placement:
    """Slurm ``topology/tree`` placement with ``select/cons_tres`` best fit.

    Contract (Slurm Topology Guide, https://slurm.schedmd.com/topology.html, "Tree
    Topology": "identify the lowest level switch in the hierarchy that can satisfy a
    job's request and then allocate resources on its underlying leaf switches using a
    best-fit algorithm"; the rules below are those of ``_eval_nodes_topo`` in
    ``select/cons_tres``):

    1. Top switch: among the domains that can hold all ``count`` units now, the one of
       the lowest level (height); on a tie the tightest (fewest units free), then the
       first in topology order.
    2. Filling it: while units remain, among its children with room, if some can hold
       all the rest take the tightest such child, else the largest (fewest leaves);
       recurse into the child (hierarchically, so later leaves are the closest ones —
       what Slurm 23.02+ does with leaf distances). Within a leaf, hosts with the
       least free capacity that still fits go first (best fit), then topology order.
    3. Without a common switch nothing is placed (Slurm never spans roots), unless the
       topology allows spanning (Kubernetes): then the roots are filled as in 2.
    4. ``max_leaf_domains=N`` is ``--switches=N``: if the allocation of 1-3 uses more
       than N leaves, the lowest domain whose N largest leaves can hold the job is used
       instead (largest leaves first, the tightest sufficient leaf last); if there is
       none the result does not fit and ``reason`` says "does not fit within N leaf
       switch(es) now". Waiting up to the ``@T`` part is the caller's business.

    Fragmentation: steps 1 and 2 choose the tightest domain and hosts that fit, so
    that the largest free domains stay whole for the next job ("fewest free nodes
    that fit"). All-or-nothing; never more than a host's free capacity.
    """
    algorithm = "tree_best_fit"
    units = _units(topology, request)
    caps = _capacities(topology, units)
    index = _index(topology)
    count = request.count
    total = sum(caps[id(r)] for r in topology.roots)
    fitting = [d for d in topology.domains if caps[id(d)] >= count]
    chosen: list[tuple[str, int]]
    if fitting:
        top = min(fitting, key=lambda d: (d.height, caps[id(d)], index[id(d)]))
        chosen = _fill(topology, [top], count, units, caps, index)
    elif topology.spanning and total >= count:
        chosen = _fill(topology, list(topology.roots), count, units, caps, index)
    elif total >= count:
        biggest = max(caps[id(r)] for r in topology.roots)
        return _no_fit(algorithm, request,
                       f"{_within(max_leaf_domains)}{count} {request.unit}(s) requested; "
                       f"{total} fit now but at most "
                       f"{biggest} under one top-level switch (no job spans switches "
                       f"without a common parent)")
    else:
        return _no_fit(algorithm, request, _within(max_leaf_domains) + _shortage(request, total))
    placement = _result(topology, algorithm, request, chosen)
    if max_leaf_domains is None or len(placement.leaf_domains) <= max_leaf_domains:
        return placement
    return _within_leaves(topology, request, max_leaf_domains, units, caps, index)


def _within(limit: int | None) -> str:
    return "" if limit is None else f"does not fit within {limit} leaf switch(es) now: "


def _fill(topology: Topology, candidates: Sequence[Domain], need: int, units: Units,
          caps: Mapping[int, int], index: Mapping[int, int]) -> list[tuple[str, int]]:
    """``need`` units from ``candidates`` (siblings), step 2 of :func:`tree_best_fit`."""
    room = {id(d): caps[id(d)] for d in candidates}
    chosen: list[tuple[str, int]] = []
    while need > 0:
        open_ = [d for d in candidates if room[id(d)] > 0]
        if not open_:
            break
        enough = [d for d in open_ if room[id(d)] >= need]
        if enough:
            d = min(enough, key=lambda d: (room[id(d)], index[id(d)]))
        else:
            d = min(open_, key=lambda d: (-room[id(d)], index[id(d)]))
        take = min(need, room[id(d)])
        room[id(d)] = 0
        if d.hosts:
            chosen += _take_hosts(topology, d.hosts, take, units)
        else:
            chosen += _fill(topology, d.children, take, units, caps, index)
        need -= take
    return chosen


def _leaves_under(domain: Domain) -> list[Domain]:
    return [d for d in domain.walk() if d.hosts]


#: The height of the virtual domain above all roots (a spanning topology only).
_ABOVE_ROOTS = 1 << 30


def _within_leaves(topology: Topology, request: PlacementRequest, limit: int, units: Units,
                   caps: Mapping[int, int], index: Mapping[int, int]) -> Placement:
    """Step 4 of :func:`tree_best_fit`."""
    count = request.count
    best: tuple[tuple[int, int, int, int], list[Domain]] | None = None
    fewest = math.inf
    scopes: list[tuple[int, int, list[Domain]]] = [
        (d.height, index[id(d)], _leaves_under(d)) for d in topology.domains
        if caps[id(d)] >= count]
    if topology.spanning:
        scopes.append((_ABOVE_ROOTS, len(index), list(topology.leaves)))
    for height, where, leaves in scopes:
        ranked = sorted((leaf for leaf in leaves if caps[id(leaf)] > 0),
                        key=lambda leaf: (-caps[id(leaf)], index[id(leaf)]))
        acc, k = 0, 0
        for leaf in ranked:
            acc += caps[id(leaf)]
            k += 1
            if acc >= count:
                break
        if acc < count:
            continue
        fewest = min(fewest, k)
        if k > limit:
            continue
        key = (height, k, sum(caps[id(leaf)] for leaf in leaves), where)
        if best is None or key < best[0]:
            best = (key, ranked)
    if best is None:
        hint = "" if fewest is math.inf else f"; the fewest that hold it now: {int(fewest)}"
        return _no_fit("tree_best_fit", request,
                       f"{_within(limit)}{count} {request.unit}(s) requested{hint}")
    ranked = best[1]
    chosen: list[tuple[str, int]] = []
    need = count
    rest = list(ranked)
    while need > 0 and rest:
        enough = [leaf for leaf in rest if caps[id(leaf)] >= need]
        leaf = (min(enough, key=lambda leaf: (caps[id(leaf)], index[id(leaf)])) if enough
                else rest[0])
        rest.remove(leaf)
        take = min(need, caps[id(leaf)])
        chosen += _take_hosts(topology, leaf.hosts, take, units)
        need -= take
    return _result(topology, "tree_best_fit", request, chosen)


def within_switches(topology: Topology, request: PlacementRequest, switches: int) -> Placement:
    """``--switches=N``: :func:`tree_best_fit` with at most ``switches`` leaf domains."""
    return tree_best_fit(topology, request, max_leaf_domains=switches)


# --- Slurm topology/block --------------------------------------------------------------


def block_placement(topology: Topology, request: PlacementRequest,
                    block_sizes: Sequence[int] | None = None) -> Placement:
    """Slurm ``topology/block`` placement.

    Contract (topology.yaml(5) and topology.conf(5) "topology/block"; Slurm Topology
    Guide "Block Topology"): the leaf domains, in topology order, are the *base blocks*
    (``bblocks``). ``block_sizes`` are node counts: the planning base block size first,
    then the aggregate sizes, each a power-of-two multiple of the base size larger than
    the one before (default: base = the smallest leaf, then doubling while there are
    enough base blocks). An aggregate block of size S is S/base consecutive base blocks,
    aligned on multiples of S/base (as Slurm aggregates them).

    1. Levels are tried from the smallest size that can hold ``count`` upwards; at a
       level the aggregate with enough free units and the fewest free units is taken
       (best fit), first in order on a tie.
    2. Inside it, the fewest base blocks: largest first, the tightest sufficient one
       last; inside a base block hosts go tightest first (as :func:`tree_best_fit`).
    3. A job larger than the largest size uses the fewest aggregates of the largest
       size, filled as in 2. If nothing holds it now, the result does not fit.

    Raises ValueError for block sizes that are not power-of-two multiples of the base.
    """
    algorithm = "block_placement"
    bblocks = list(topology.leaves)
    if not bblocks:
        return _no_fit(algorithm, request, "the topology has no blocks")
    sizes = list(block_sizes) if block_sizes else _default_block_sizes(bblocks)
    base = sizes[0]
    for a, b in itertools.pairwise(sizes):
        ratio = b // base
        if b <= a or b % base or ratio & (ratio - 1):
            raise ValueError(f"block sizes must grow by powers of two of {base}: {sizes}")
    units = _units(topology, request)
    caps = _capacities(topology, units)
    index = _index(topology)
    count = request.count
    total = sum(caps[id(b)] for b in bblocks)
    if total < count:
        return _no_fit(algorithm, request, _shortage(request, total))

    def groups(size: int) -> list[list[Domain]]:
        per = max(size // base, 1)
        return [bblocks[i:i + per] for i in range(0, len(bblocks), per)]

    def cap(group: Sequence[Domain]) -> int:
        return sum(caps[id(b)] for b in group)

    def fewest(items: list[list[Domain]], need: int) -> list[list[Domain]]:
        """Largest first, the tightest sufficient last (Kueue's BestFit order too)."""
        out: list[list[Domain]] = []
        rest = [g for g in items if cap(g) > 0]
        while need > 0 and rest:
            enough = [g for g in rest if cap(g) >= need]
            g = (min(enough, key=lambda g: (cap(g), index[id(g[0])])) if enough
                 else min(rest, key=lambda g: (-cap(g), index[id(g[0])])))
            rest.remove(g)
            out.append(g)
            need -= cap(g)
        return out if need <= 0 else []

    chosen_groups: list[list[Domain]] = []
    level_size = sizes[-1]
    for size in [s for s in sizes if s >= count]:
        fit = [g for g in groups(size) if cap(g) >= count]
        if fit:
            chosen_groups = [min(fit, key=lambda g: (cap(g), index[id(g[0])]))]
            level_size = size
            break
    else:
        if count > sizes[-1]:
            chosen_groups = fewest(groups(sizes[-1]), count)
        if not chosen_groups:
            return _no_fit(algorithm, request,
                           f"no block of {'/'.join(map(str, sizes))} {request.unit}s has "
                           f"{count} free {request.unit}(s) now")
    chosen: list[tuple[str, int]] = []
    need = count
    for group in chosen_groups:
        for one in fewest([[b] for b in group], min(need, cap(group))):
            take = min(need, caps[id(one[0])])
            chosen += _take_hosts(topology, one[0].hosts, take, units)
            need -= take
            if need <= 0:
                break
    placement = _result(topology, algorithm, request, chosen)
    if not placement.fits or level_size == base:
        return placement
    used = set(placement.hosts)
    labels = tuple(f"{g[0].name}..{g[-1].name}" if len(g) > 1 else g[0].name
                   for g in groups(level_size)
                   if any(h in used for b in g for h in b.hosts))
    return Placement(algorithm, count, placement.hosts, placement.units,
                     (*placement.levels[:1], LevelUse(f"block{level_size}", labels)))


def _default_block_sizes(bblocks: Sequence[Domain]) -> list[int]:
    base = max(min(len(b.hosts) for b in bblocks), 1)
    sizes = [base]
    while (1 << len(sizes)) <= len(bblocks):
        sizes.append(base << len(sizes))
    return sizes


# --- Kueue TAS -------------------------------------------------------------------------

Node = Domain | str  # a domain, or a host by name


def kueue_tas(topology: Topology, request: PlacementRequest, level: str,
              mode: Literal["required", "preferred", "unconstrained"] = "required"
              ) -> Placement:
    """Kueue Topology Aware Scheduling with the default BestFit profile.

    Contract (Kueue docs "Topology Aware Scheduling",
    https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/, and the
    algorithm of ``TASFlavorSnapshot.findTopologyAssignment`` in
    ``pkg/cache/tas_flavor_snapshot.go``):

    * Phase 1: every host's count is the units that fit on it; a domain's count is
      the sum of its children's.
    * Phase 2a, at ``level`` (a name of :attr:`Topology.levels` or the host level):
      domains sorted by count, largest first, ties by their level values (path). If
      the largest holds all ``count`` units, BestFit takes the *smallest* one that
      does. Otherwise ``required`` fails ("topology ... allows to fit only M out of
      N"); ``preferred`` retries one level up; at the top level (or ``unconstrained``,
      which never goes up) it takes domains largest first — the last one the smallest
      that holds the rest — until all fit, or fails.
    * Phase 2b: level by level down to the hosts, the children of the chosen domains
      sorted the same way are taken largest first with the last one best fit —
      minimising the number of domains at each level.

    Spanning several roots happens only if ``topology.spanning``. All-or-nothing.
    """
    algorithm = f"kueue_tas({mode}:{level})"
    all_levels = [*topology.levels, topology.host_level]
    if level not in all_levels:
        return _no_fit(algorithm, request, f"no requested topology level: {level}")
    units = _units(topology, request)
    caps = _capacities(topology, units)
    count = request.count

    def state(n: Node) -> int:
        return units.get(n, 0) if isinstance(n, str) else caps[id(n)]

    def path(n: Node) -> tuple[str, ...]:
        if isinstance(n, str):
            return (*topology.leaf_of[n].path, n)
        return n.path

    def ordered(nodes: Iterable[Node]) -> list[Node]:
        return sorted(nodes, key=lambda n: (-state(n), path(n)))

    def at(idx: int) -> list[Node]:
        name = all_levels[idx]
        if name == topology.host_level:
            return list(topology.order)
        return [d for d in topology.domains if d.level == name]

    def best_fit(items: Sequence[Node], need: int) -> int:
        best = 0
        for i, it in enumerate(items):
            if state(it) >= need and state(it) != state(items[best]):
                best = i
        return best

    idx = all_levels.index(level)
    fit: list[Node] = []
    while True:
        items = ordered(at(idx))
        if not items:
            return _no_fit(algorithm, request, f"no topology domains at level: {all_levels[idx]}")
        top = items[0]
        if state(top) >= count:
            fit = [items[best_fit(items, count)]]
            break
        if mode == "required":
            return _no_fit(algorithm, request,
                           f"topology {level!r} allows to fit only {state(top)} out of "
                           f"{count} {request.unit}(s)")
        if idx > 0 and mode == "preferred":
            idx -= 1
            continue
        remaining = count
        i = 0
        while remaining > 0 and i < len(items) and state(items[i]) > 0:
            offset = best_fit(items[i:], remaining) if state(items[i]) >= remaining else 0
            fit.append(items[i + offset])
            remaining -= state(items[i])
            i += 1
        if remaining > 0:
            return _no_fit(algorithm, request, _shortage(request, count - remaining))
        if (not topology.spanning and idx == 0 and all_levels[0] != topology.host_level
                and len(fit) > 1):
            return _no_fit(algorithm, request,
                           f"{count} {request.unit}(s) would span {len(fit)} top-level "
                           f"domains, which this topology does not allow")
        break

    assigned = _to_minimum(fit, count, state, best_fit)
    while any(not isinstance(n, str) for n, _ in assigned):
        lower: list[Node] = []
        for n, _ in assigned:
            if isinstance(n, str):
                lower.append(n)
            else:
                lower.extend(n.children or n.hosts)
        assigned = _to_minimum(ordered(lower), count, state, best_fit)
    chosen = [(n, c) for n, c in assigned if isinstance(n, str)]
    return _result(topology, algorithm, request, chosen)


def _to_minimum(items: Sequence[Node], count: int, state: Callable[[Node], int],
                best_fit: Callable[[Sequence[Node], int], int]) -> list[tuple[Node, int]]:
    """Kueue's ``updateCountsToMinimum``: largest first, the last one best fit."""
    out: list[tuple[Node, int]] = []
    remaining = count
    for i, it in enumerate(items):
        if state(it) >= remaining:
            it = items[i + best_fit(items[i:], remaining)]
            out.append((it, remaining))
            return out
        remaining -= state(it)
        out.append((it, state(it)))
    return out


# --- the baseline ----------------------------------------------------------------------


def first_fit(topology: Topology, request: PlacementRequest) -> Placement:
    """The first hosts in topology order that fit, ignoring the tree (the benchmark
    baseline; what a topology-blind scheduler does). All-or-nothing."""
    units = _units(topology, request)
    if sum(units.values()) < request.count:
        return _no_fit("first_fit", request, _shortage(request, sum(units.values())))
    chosen: list[tuple[str, int]] = []
    need = request.count
    for name, n in units.items():
        take = min(n, need)
        chosen.append((name, take))
        need -= take
        if need == 0:
            break
    return _result(topology, "first_fit", request, chosen)


# --- requests from a TrainJob ----------------------------------------------------------

_SIMPLE_FEATURES = re.compile(r"^[A-Za-z0-9_.:-]+(?:[&,][A-Za-z0-9_.:-]+)*$")


def features_of(constraint: str | None) -> frozenset[str] | None:
    """The features a Slurm ``--constraint`` requires, when it is a plain conjunction
    (``ib``, ``ib&v100``); ``None`` when it is anything else (``a|b``, counts,
    brackets), which the bridge does not evaluate."""
    if not constraint:
        return frozenset()
    if not _SIMPLE_FEATURES.match(constraint):
        return None
    return frozenset(re.split(r"[&,]", constraint))


def request_from_job(job: TrainJob, plan: LaunchPlan,
                     options: SchedulingOptions) -> PlacementRequest:
    """The placement request of a TrainJob: its shape's nodes (:mod:`bridge.shape`),
    each needing the shape's CPUs (in millicores), memory and GPUs per node: what the
    Slurm options ask per node (tasks per node x CPUs per task, ``--mem``,
    ``--gpus-per-node``), else ``resourcesPerNode`` (cpu, memory, ``nvidia.com/gpu``;
    ``requests``, else ``limits``), else one CPU per rank. Partition, ``--exclusive``,
    ``--exclude`` and a plain-conjunction ``--constraint`` restrict the hosts.
    Raises ValueError for a malformed quantity or host list."""
    shape = resolve_shape(job, plan, options)
    nodes = shape.nodes
    cpu = (shape.cpu_millis_per_node if shape.cpu_millis_per_node is not None
           else (shape.ranks_per_node or 1) * 1000)
    mem = shape.mem_per_node_mb or 0
    gpus = shape.gpus_per_node or 0
    excluded = frozenset(hostlist.expand_hostlist(options.exclude)) if options.exclude else (
        frozenset())
    return PlacementRequest(count=nodes, cpu_millis=cpu, memory_mb=mem, gpus=gpus,
                            exclusive=options.exclusive, partition=options.partition,
                            features=features_of(options.constraint) or frozenset(),
                            excluded=excluded)

