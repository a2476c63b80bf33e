"""Topology-aware placement: pure functions ``(Topology, PlacementRequest) -> Placement``.

Every algorithm (here and in ``bench/placement_algorithms.py``)

* is **pure** and **deterministic**: it reads its arguments only, changes nothing, and
  the same input gives the same output (ties are broken by the world's order of
  domains and hosts, :attr:`bridge.topology.Topology.order`);
* is **all-or-nothing** (gang semantics): the result holds exactly
  ``request.count`` units, or no host at all and a ``reason``;
* **never over-commits**: a host gets at most as many units as its free capacity holds
  (:meth:`PlacementRequest.units_on`), and appears once in the result;
* reports its **score**: the domains used at each level, leaf level first
  (:attr:`Placement.levels`).

This module holds the answer type, the building blocks every algorithm shares
(best-fit host choice, the result; what fits on each host and domain, and the request
type, come from :mod:`bridge.placement_capacity`, which keeps them per change and is
re-exported here), and the algorithm the engine uses (docs/placement.md has worked examples):
:func:`tree_best_fit` — Slurm ``topology/tree`` + ``select/cons_tres`` best fit; with
``max_leaf_domains`` it is ``--switches=N`` (:func:`within_switches`). The emulations
that only the benchmark compares it with (Slurm ``topology/block``, Kueue TAS, a
topology-blind first fit) live in ``bench/placement_algorithms.py``; a TrainJob becomes
a request in :mod:`bridge.placement_request`.

A *unit* is what the request counts: a node for Slurm (``one_per_host=True``: each
unit on its own host), a pod for Kueue (several pods may share a host when
``one_per_host=False``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.placement_capacity import (
    PlacementRequest,
    Units,
    capacity,
    domain_capacities,
    fitting_units,
)
from bridge.topology import Domain, Topology

__all__ = [
    "LevelUse",
    "Placement",
    "PlacementRequest",
    "Units",
    "capacity",
    "domain_capacities",
    "domain_index",
    "fitting_units",
    "no_fit",
    "placement_of",
    "shortage",
    "take_hosts",
    "tree_best_fit",
    "within_switches",
]


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


# --- building blocks shared by the algorithms ------------------------------------------

def domain_index(topology: Topology) -> Mapping[int, int]:
    """``id(domain)`` -> its position in the topology's order (the tie-breaker)."""
    return topology.position


def _tightness(topology: Topology, name: str) -> tuple[int, int, int, int]:
    """Sort key for hosts: the least free first (best fit), then tree order. GPUs
    first: a CPU job keeps off the GPU hosts while others will do."""
    h = topology.hosts[name]
    return (h.free_gpus, h.free_cpu_millis, h.free_memory_mb, topology.order[name])


def take_hosts(topology: Topology, hosts: Iterable[str], need: int,
               units: Mapping[str, int]) -> list[tuple[str, int]]:
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
    index = domain_index(topology)
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


def placement_of(topology: Topology, algorithm: str, request: PlacementRequest,
                 chosen: Sequence[tuple[str, int]]) -> Placement:
    """The :class:`Placement` of ``chosen`` (host, units) pairs: hosts merged and in
    topology order, with the domains used per level; never a partial gang (a result
    that does not hold exactly ``request.count`` units does not fit)."""
    merged: dict[str, int] = {}
    for name, n in chosen:
        merged[name] = merged.get(name, 0) + n
    if sum(merged.values()) != request.count:  # defensive: never a partial gang
        return Placement(algorithm, request.count, reason="internal: partial placement")
    names = sorted(merged, key=lambda h: topology.order[h])
    return Placement(algorithm, request.count, tuple(names), tuple(merged[h] for h in names),
                     _levels(topology, names))


def no_fit(algorithm: str, request: PlacementRequest, reason: str) -> Placement:
    """The answer "does not fit now", with ``reason``."""
    return Placement(algorithm, request.count, reason=reason)


def shortage(request: PlacementRequest, total: int) -> str:
    """The reason for a request larger than the ``total`` units that fit anywhere."""
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
    units, caps = capacity(topology, request)
    index = domain_index(topology)
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
        return no_fit(algorithm, request,
                       f"{_within(max_leaf_domains)}{count} {request.unit}(s) requested; "
                       f"{total} fit now but at most "
                       f"{biggest} under one top-level switch (no job spans switches "
                       f"without a common parent)")
    else:
        return no_fit(algorithm, request, _within(max_leaf_domains) + shortage(request, total))
    placement = placement_of(topology, algorithm, request, chosen)
    if max_leaf_domains is None or len(placement.leaf_domains) <= max_leaf_domains:
        return placement
    return _within_leaves(topology, request, max_leaf_domains, units, caps, index)


def _within(limit: int | None) -> str:
    return "" if limit is None else f"does not fit within {limit} leaf switch(es) now: "


def _fill(topology: Topology, candidates: Sequence[Domain], need: int,
          units: Mapping[str, int],
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
            chosen += take_hosts(topology, d.hosts, take, units)
        else:
            chosen += _fill(topology, d.children, take, units, caps, index)
        need -= take
    return chosen


def _leaves_under(domain: Domain) -> list[Domain]:
    return [d for d in domain.walk() if d.hosts]


#: The height of the virtual domain above all roots (a spanning topology only).
_ABOVE_ROOTS = 1 << 30


def _within_leaves(topology: Topology, request: PlacementRequest, limit: int,
                   units: Mapping[str, int],
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
        return no_fit("tree_best_fit", request,
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
        chosen += take_hosts(topology, leaf.hosts, take, units)
        need -= take
    return placement_of(topology, "tree_best_fit", request, chosen)


def within_switches(topology: Topology, request: PlacementRequest, switches: int) -> Placement:
    """``--switches=N``: :func:`tree_best_fit` with at most ``switches`` leaf domains."""
    return tree_best_fit(topology, request, max_leaf_domains=switches)
