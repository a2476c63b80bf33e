"""What fits where, kept up to date per change instead of rescanned per job.

:class:`PlacementRequest` is what one job needs per unit, and how many units fit on a
host (:meth:`PlacementRequest.units_on`); :mod:`bridge.placement` re-exports it.
:func:`fitting_units` and :func:`domain_capacities` are the definitions: a scan of
every host, and a sum over every domain. :func:`capacity` gives the same two answers,
remembered per *request shape* (the request without its count, except for a pod
request, whose count caps the units on a host) on the topology. When
:meth:`bridge.topology.Topology.with_hosts` makes the next topology of a pass (a job's
placement applied), the remembered answers move to it and are corrected for the
changed hosts only: a host's units, and the capacity of its domain and that domain's
ancestors. Placing one job after another on 10,000 hosts then costs the hosts a job
touches, not every host of the tree (``bench/placement.py``, part (a)).

Contracts:

* :func:`capacity` answers exactly what ``fitting_units`` / ``domain_capacities``
  answer for the same topology, in the same (tree) order; a property test checks it
  after any sequence of updates.
* The answers are read-only, and valid until the next ``with_hosts`` made from this
  topology (which takes them over). One lineage of topologies is used by one thread at
  a time (the engine places on its event loop).
* A change that lets a host take units it could not take before (a job ended, in the
  benchmark's simulation) drops that shape's answer: it is computed again when next
  asked, so the tree order of the answer never changes.
* At most :data:`MAX_SHAPES` shapes are remembered per topology (least recently used
  goes first): their memory is a few hundred KB each at 10,000 hosts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from bridge.topology import Host, Topology

__all__ = ["MAX_SHAPES", "Capacity", "PlacementRequest", "Units", "capacity",
           "domain_capacities", "fitting_units"]

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


#: Host name -> units of the request that fit on it now.
Units = dict[str, int]

#: Request shapes remembered per topology.
MAX_SHAPES = 16


def fitting_units(topology: Topology, request: PlacementRequest) -> Units:
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


def domain_capacities(topology: Topology, units: Mapping[str, int]) -> dict[int, int]:
    """``id(domain)`` -> units that fit in the whole domain."""
    caps = dict.fromkeys(map(id, topology.domains), 0)
    leaf_of = topology.leaf_of
    for name, n in units.items():
        caps[id(leaf_of[name])] += n
    for d in reversed(topology.domains):  # children before parents
        if d.children:
            caps[id(d)] += sum(caps[id(c)] for c in d.children)
    return caps


class Capacity(NamedTuple):
    """:func:`fitting_units` and :func:`domain_capacities` of one request shape."""

    units: Mapping[str, int]
    caps: Mapping[int, int]


class _Entry:
    """One remembered shape: the request that stands for it, and its answers."""

    __slots__ = ("caps", "request", "units")

    def __init__(self, request: PlacementRequest, units: Units, caps: dict[int, int]):
        self.request = request
        self.units = units
        self.caps = caps

    def update(self, topology: Topology, changed: set[str],
               chains: dict[int, tuple[int, ...]]) -> bool:
        """Correct the answers for the ``changed`` hosts; False when a host gained room
        it did not have (the entry must be computed again to keep tree order)."""
        hosts, order, leaf_of = topology.hosts, topology.order, topology.leaf_of
        units, caps, request = self.units, self.caps, self.request
        for name in changed:
            if name not in order:
                continue  # outside the tree: never counted
            old = units.get(name, 0)
            new = request.units_on(hosts[name])
            if new == old:
                continue
            if old == 0:
                return False
            if new == 0:
                del units[name]
            else:
                units[name] = new
            leaf = leaf_of[name]
            chain = chains.get(id(leaf))
            if chain is None:
                chain = chains[id(leaf)] = tuple(id(d) for d in topology.ancestors(leaf))
            delta = new - old
            for d in chain:
                caps[d] += delta
        return True


def _shape(request: PlacementRequest) -> PlacementRequest:
    """The request standing for its shape: what fits on a host depends on the count
    only through the cap on a host (1 node, or at most ``count`` pods)."""
    cap = 1 if request.one_per_host else request.count
    return request if request.count == cap else replace(request, count=cap)


def capacity(topology: Topology, request: PlacementRequest) -> Capacity:
    """:func:`fitting_units` and :func:`domain_capacities` for ``request`` on
    ``topology``, remembered and kept up to date (see the module docstring)."""
    memo = topology.memo()
    entries: dict[PlacementRequest, _Entry] = memo.data
    if memo.changed:
        changed, memo.changed = memo.changed, set()
        for key, old in list(entries.items()):
            if not old.update(topology, changed, memo.chains):
                del entries[key]
    key = _shape(request)
    entry: _Entry | None = entries.pop(key, None)
    if entry is None:
        units = fitting_units(topology, key)
        entry = _Entry(key, units, domain_capacities(topology, units))
        while len(entries) >= MAX_SHAPES:
            del entries[next(iter(entries))]
    entries[key] = entry  # most recently used last
    return Capacity(entry.units, entry.caps)
