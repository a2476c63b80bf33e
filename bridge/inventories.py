"""The back ends' inventories as the engine last read them, and their topologies.

One :class:`Inventories` per engine. An inventory is read again before a placement when
it is older than ``max_age`` seconds or was marked stale (after a submission changed
the world: :meth:`Inventories.mark_stale`); a background task per back end
(:meth:`Inventories.refresh_forever`) keeps it from growing old while nothing is placed
(every 60 s; every 5 s until the first read succeeds). The topology is built once per
inventory read and partition, not once per placement. A back end that cannot answer keeps its last
inventory (or none): placement then lets the back end choose.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from bridge.backend import Backend, BackendUnavailable, Inventory
from bridge.placement_decision import PlacementDecision, booked_in
from bridge.topology import Topology, topology_from_inventory

log = structlog.get_logger("hpc_bridge.engine")

#: The read time of an inventory that must be read again before the next placement.
#: (Not 0: the monotonic clock counts from boot, so on a machine up for less than
#: ``max_age`` a 0 would still look fresh.)
STALE = float("-inf")
#: Seconds a back end has to answer an inventory read made for a placement.
READ_TIMEOUT = 10.0


class Inventories:
    """The last inventory of each back end, when it was read, and its topology."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self._inventory: dict[str, Inventory] = {}
        self._read_at: dict[str, float] = {}
        #: back end -> (the inventory, its topologies by the id of their units, which
        #: the inventory holds: see Inventory.switches_for)
        self._topology: dict[str, tuple[Inventory, dict[int, Topology]]] = {}

    def get(self, name: str) -> Inventory | None:
        """The last inventory read from back end ``name`` (None before the first)."""
        return self._inventory.get(name)

    def set(self, name: str, inventory: Inventory) -> None:
        self._inventory[name] = inventory
        self._read_at[name] = time.monotonic()

    def mark_stale(self, name: str) -> None:
        """The next placement on ``name`` reads its inventory again."""
        self._read_at[name] = STALE

    async def read(self, name: str, backend: Backend) -> None:
        """Read ``name``'s inventory now (at most :data:`READ_TIMEOUT` s);
        BackendUnavailable or TimeoutError if it cannot."""
        self.set(name, await asyncio.wait_for(backend.inventory(), READ_TIMEOUT))

    async def fresh(self, name: str, backend: Backend) -> Inventory | None:
        """``name``'s inventory, read again first when it is older than ``max_age`` (or
        stale after a submission). None without inventory."""
        age = time.monotonic() - self._read_at.get(name, STALE)
        if name not in self._inventory or age > self.max_age:
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
                self.set(name, await backend.inventory())
            except BackendUnavailable as exc:
                log.info("inventory not available", backend=name, error=str(exc))
            except Exception:
                log.exception("inventory failed", backend=name)


class PassTopologies:
    """The topologies one submission pass places its jobs in, on one back end.

    The inventory is read (if old) at most once per pass, at the first job that needs
    it, whatever partitions the jobs name; each partition's topology is built from that
    one snapshot, once per distinct topology, with the hosts this pass booked taken
    from it (:meth:`book`), so no host is booked twice whichever topology a job reads.
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

    def book(self, decision: PlacementDecision) -> None:
        """Take a fitting placement's hosts from every topology of the pass."""
        if decision.placement is None or not decision.placement.fits:
            return
        self._booked.append(decision)
        self._built = {k: booked_in(t, [decision]) for k, t in self._built.items()}
