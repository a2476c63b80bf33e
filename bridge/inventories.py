"""The back ends' inventories as the engine last read them, and their topologies.

One :class:`Inventories` per engine. An inventory is read again before a placement when
it is older than ``max_age`` seconds, or when it was marked stale (a submission changed
the world: :meth:`Inventories.mark_stale`) and is at least ``min_reread`` seconds old.
Until then every placement whose job is being submitted, or was submitted after the
last read was asked for, is taken off it (:meth:`Inventories.book`,
:meth:`Inventories.ended`), so a stream of submissions costs one read per
``min_reread``, not one per submission, and no host is booked twice by the bridge. A
read drops the bookings of jobs whose submission ended before it was asked for (the
back end's answer holds them); a failed submission's booking goes at once; an answer
to a read asked for before the last one taken is ignored. A background task per back
end (:meth:`Inventories.refresh_forever`) keeps it from growing old while nothing is
placed (every 60 s; every 5 s until the first read succeeds). The topology is built
once per inventory read and partition, not once per placement. A back end that cannot
answer keeps its last inventory (or none): placement then lets the back end choose.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from bridge.backend import Backend, BackendUnavailable, Inventory
from bridge.placement_decision import PlacementDecision, booked_in
from bridge.topology import Topology, topology_from_inventory

log = structlog.get_logger("hpc_bridge.engine")

#: The read time of an inventory never read (and the time of a stale mark never made).
#: (Not 0: the monotonic clock counts from boot, so on a machine up for less than
#: ``max_age`` a 0 would still look fresh.)
STALE = float("-inf")
#: Seconds a back end has to answer an inventory read made for a placement.
READ_TIMEOUT = 10.0


class Inventories:
    """The last inventory of each back end, when it was read, and its topology."""

    def __init__(self, max_age: float, min_reread: float = 1.0) -> None:
        self.max_age = max_age
        self.min_reread = min_reread
        self._inventory: dict[str, Inventory] = {}
        #: back end -> when its inventory was asked for (monotonic)
        self._read_at: dict[str, float] = {}
        #: back end -> when a submission last made its inventory stale (monotonic)
        self._stale_at: dict[str, float] = {}
        #: back end -> job id -> its placement and when its submission ended (None:
        #: still being submitted), until a read asked for after that end
        self._booked: dict[str, dict[int, tuple[PlacementDecision, float | None]]] = {}
        #: back end -> (the inventory, its topologies by the id of their units, which
        #: the inventory holds: see Inventory.switches_for)
        self._topology: dict[str, tuple[Inventory, dict[int, Topology]]] = {}

    def get(self, name: str) -> Inventory | None:
        """The last inventory read from back end ``name`` (None before the first)."""
        return self._inventory.get(name)

    def set(self, name: str, inventory: Inventory, asked_at: float | None = None) -> None:
        """``inventory`` is ``name``'s, as the back end answered a read asked for at
        ``asked_at`` (default: now): the bookings of submissions that ended before then
        are in it and dropped; a stale mark made since stays. An answer to a read
        asked for before the one in place is ignored (reads may overlap)."""
        asked_at = time.monotonic() if asked_at is None else asked_at
        if asked_at < self._read_at.get(name, STALE):
            return
        self._inventory[name] = inventory
        self._read_at[name] = asked_at
        if self._stale_at.get(name, STALE) < asked_at:
            self._stale_at.pop(name, None)
        booked = self._booked.get(name)
        if booked:
            self._booked[name] = {job_id: (d, end) for job_id, (d, end) in booked.items()
                                  if end is None or end >= asked_at}

    def mark_stale(self, name: str) -> None:
        """A submission changed ``name``: its inventory is read again before a
        placement once it is ``min_reread`` seconds old."""
        self._stale_at[name] = time.monotonic()

    def book(self, name: str, job_id: int, decision: PlacementDecision) -> None:
        """Job ``job_id`` is placed on ``name`` by a fitting ``decision`` and its
        submission starts: its hosts are taken off the inventory until :meth:`ended`
        says it failed, or a read asked for after it ended (module docstring)."""
        if decision.placement is not None and decision.placement.fits:
            self._booked.setdefault(name, {})[job_id] = (decision, None)

    def ended(self, name: str, job_id: int, submitted: bool) -> None:
        """Job ``job_id``'s submission to ``name`` ended: it is in its back end
        (``submitted``: its booking stays until a read asked for from now), or it is
        not (its booking goes now)."""
        booked = self._booked.get(name, {})
        if job_id not in booked:
            return
        if submitted:
            booked[job_id] = (booked[job_id][0], time.monotonic())
        else:
            del booked[job_id]

    def booked(self, name: str) -> list[PlacementDecision]:
        """The placements booked on ``name`` and not yet in its inventory."""
        return [decision for decision, _ in self._booked.get(name, {}).values()]

    async def read(self, name: str, backend: Backend) -> None:
        """Read ``name``'s inventory now (at most :data:`READ_TIMEOUT` s);
        BackendUnavailable or TimeoutError if it cannot."""
        asked_at = time.monotonic()
        async with asyncio.timeout(READ_TIMEOUT):
            inventory = await backend.inventory()
        self.set(name, inventory, asked_at)

    async def fresh(self, name: str, backend: Backend) -> Inventory | None:
        """``name``'s inventory, read again first when it is older than ``max_age``, or
        stale after a submission and at least ``min_reread`` old. None without
        inventory."""
        age = time.monotonic() - self._read_at.get(name, STALE)
        stale = name in self._stale_at and age >= self.min_reread
        if name not in self._inventory or age > self.max_age or stale:
            try:
                await self.read(name, backend)
            except (BackendUnavailable, TimeoutError) as exc:
                log.info("inventory not available for placement", backend=name,
                         error=str(exc) or type(exc).__name__)
            except Exception:
                log.exception("inventory failed", backend=name)
        return self._inventory.get(name)

    def topology(self, name: str, inventory: Inventory, partition: str | None
                 ) -> Topology | None:
        """The topology of ``inventory`` (``name``'s) as a job in ``partition`` sees it
        (:func:`bridge.topology.topology_from_inventory`); None when that partition's
        own topology could not be read. Built once per inventory and topology:
        partitions that share a topology share it."""
        units = inventory.switches_for(partition)
        if units is None:
            return None
        cached = self._topology.get(name)
        if cached is None or cached[0] is not inventory:
            cached = (inventory, {})
            self._topology[name] = cached
        topology = cached[1].get(id(units))
        if topology is None:
            topology = topology_from_inventory(inventory, partition)
            cached[1][id(units)] = topology
        return topology

    async def refresh_forever(self, name: str, backend: Backend,
                              interval: float = 60.0) -> None:
        """Read ``name``'s inventory every ``interval`` s (5 s until one read worked)."""
        while True:
            await asyncio.sleep(interval if name in self._inventory else 5.0)
            try:
                asked_at = time.monotonic()
                self.set(name, await backend.inventory(), asked_at)
            except BackendUnavailable as exc:
                log.info("inventory not available", backend=name, error=str(exc))
            except Exception:
                log.exception("inventory failed", backend=name)


class PassTopologies:
    """The topologies one submission pass places its jobs in, on one back end.

    The inventory is read (if old) at most once per pass, at the first job that needs
    it, whatever partitions the jobs name; each partition's topology is built from that
    one snapshot, once per distinct topology, with the hosts the snapshot does not hold
    yet (jobs of earlier passes, :meth:`Inventories.booked`, and of this one,
    :meth:`book`) taken from it, so no host is booked twice whichever topology a job
    reads.
    """

    def __init__(self, inventories: Inventories, name: str, backend: Backend) -> None:
        self._inventories = inventories
        self._name = name
        self._backend = backend
        self._read = False
        self._inventory: Inventory | None = None
        self._built: dict[int, Topology | None] = {}
        self._booked: list[PlacementDecision] = []

    async def for_partition(self, partition: str | None) -> Topology | None:
        """The topology a job in ``partition`` is placed in now (None: the back end
        chooses: no inventory, or that partition's topology could not be read)."""
        if not self._read:
            self._inventory = await self._inventories.fresh(self._name, self._backend)
            self._booked = self._inventories.booked(self._name)
            self._read = True
        inventory = self._inventory
        if inventory is None:
            return None
        units = inventory.switches_for(partition)
        if units is None:
            return None
        key = id(units)
        if key not in self._built:
            self._built[key] = booked_in(
                self._inventories.topology(self._name, inventory, partition), self._booked)
        return self._built[key]

    def book(self, job_id: int, decision: PlacementDecision) -> None:
        """Take a fitting placement's hosts (job ``job_id``'s, whose submission starts)
        from every topology of the pass, and from the inventory until the back end's
        answer holds them (:meth:`Inventories.book`)."""
        if decision.placement is None or not decision.placement.fits:
            return
        self._inventories.book(self._name, job_id, decision)
        self._booked.append(decision)
        self._built = {k: booked_in(t, [decision]) for k, t in self._built.items()}
