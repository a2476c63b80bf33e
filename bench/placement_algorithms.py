"""Placement emulations that only the benchmark compares the engine's algorithm with.

The engine places with :func:`bridge.placement.tree_best_fit`; ``bench/placement.py``
measures it against these, in one run on the same job streams:

* :func:`block_placement` — Slurm ``topology/block``;
* :func:`kueue_tas` — Kueue Topology Aware Scheduling (``required`` / ``preferred`` /
  ``unconstrained``, the default BestFit profile);
* :func:`first_fit` — the baseline that ignores the topology.

They keep the contract of every placement algorithm (pure, deterministic,
all-or-nothing, never over-committing, scored per level: :mod:`bridge.placement`) and
are built from its shared building blocks. Nothing in the daemon imports this module
(an import-linter contract); tests/unit/test_placement_algorithms.py checks them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from bridge.placement import (
    LevelUse,
    Placement,
    PlacementRequest,
    capacity,
    domain_index,
    no_fit,
    placement_of,
    shortage,
    take_hosts,
)
from bridge.topology import Domain, Topology

__all__ = ["block_placement", "first_fit", "kueue_tas"]


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
        return no_fit(algorithm, request, "the topology has no blocks")
    sizes = list(block_sizes) if block_sizes else _default_block_sizes(bblocks)
    base = sizes[0]
    for a, b in itertools.pairwise(sizes):
        ratio = b // base
        if b <= a or b % base or ratio & (ratio - 1):
            raise ValueError(f"block sizes must grow by powers of two of {base}: {sizes}")
    units, caps = capacity(topology, request)
    index = domain_index(topology)
    count = request.count
    total = sum(caps[id(b)] for b in bblocks)
    if total < count:
        return no_fit(algorithm, request, shortage(request, total))

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
            return no_fit(algorithm, request,
                           f"no block of {'/'.join(map(str, sizes))} {request.unit}s has "
                           f"{count} free {request.unit}(s) now")
    chosen: list[tuple[str, int]] = []
    need = count
    for group in chosen_groups:
        for one in fewest([[b] for b in group], min(need, cap(group))):
            take = min(need, caps[id(one[0])])
            chosen += take_hosts(topology, one[0].hosts, take, units)
            need -= take
            if need <= 0:
                break
    placement = placement_of(topology, algorithm, request, chosen)
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
        return no_fit(algorithm, request, f"no requested topology level: {level}")
    units, caps = capacity(topology, request)
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
            return no_fit(algorithm, request, f"no topology domains at level: {all_levels[idx]}")
        top = items[0]
        if state(top) >= count:
            fit = [items[best_fit(items, count)]]
            break
        if mode == "required":
            return no_fit(algorithm, request,
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
            return no_fit(algorithm, request, shortage(request, count - remaining))
        if (not topology.spanning and idx == 0 and all_levels[0] != topology.host_level
                and len(fit) > 1):
            return no_fit(algorithm, request,
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
    return placement_of(topology, algorithm, request, chosen)


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
    units = capacity(topology, request).units
    if sum(units.values()) < request.count:
        return no_fit("first_fit", request, shortage(request, sum(units.values())))
    chosen: list[tuple[str, int]] = []
    need = request.count
    for name, n in units.items():
        take = min(n, need)
        chosen.append((name, take))
        need -= take
        if need == 0:
            break
    return placement_of(topology, "first_fit", request, chosen)
