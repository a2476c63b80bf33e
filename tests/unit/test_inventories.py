"""The engine's inventories between reads (bridge/inventories.py): after submissions the
inventory is read again at most once per ``min_reread``; until the back end's answer
holds a job, its placement stays booked; reads may overlap; a failed submission frees
its hosts at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bridge.backend import BackendRejected, SubmitRequest
from bridge.engine import Engine, EngineSettings
from bridge.inventories import Inventories
from bridge.nodes import Inventory
from bridge.placement_decision import PlacementDecision, plan_placement
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.states import JobState
from bridge.store import Store
from bridge.topology import topology_from_inventory
from tests.unit.builders import ALICE, BOB, inventory
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend


def two_nodes() -> PlacementDecision:
    """A fitting decision for a job that takes both CPUs of two nodes."""
    job = trainjob(cpus_per_task=2)
    decision = plan_placement(job, RuntimeCatalog().resolve(job),
                              SchedulingOptions(cpus_per_task=2), "nodelist",
                              topology_from_inventory(inventory()), 0.0, 0.0)
    assert decision.placement is not None and decision.placement.fits
    return decision


class Held(FakeBackend):
    """A back end whose inventory reads wait for :attr:`gate` when it is set up."""

    def __init__(self) -> None:
        super().__init__(inventory())
        self.gate: asyncio.Event | None = None

    async def inventory(self) -> Inventory:
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        return await super().inventory()


async def test_a_booking_stays_until_a_read_asked_for_after_its_submission_ended() -> None:
    inventories = Inventories(max_age=3600, min_reread=0.0)
    backend = Held()
    await inventories.read("slurm", backend)
    inventories.book("slurm", 1, two_nodes())
    inventories.book("slurm", 2, two_nodes())
    inventories.ended("slurm", 1, submitted=True)
    inventories.mark_stale("slurm")
    gate = backend.gate = asyncio.Event()
    reading = asyncio.create_task(inventories.read("slurm", backend))
    await asyncio.sleep(0)  # asked for: job 1's submission ended before, job 2's not yet
    inventories.ended("slurm", 2, submitted=True)
    inventories.mark_stale("slurm")  # a stale mark made while the read runs stays
    gate.set()
    await reading
    assert len(inventories.booked("slurm")) == 1  # job 2's: this answer may lack it
    calls = backend.inventory_calls
    await inventories.fresh("slurm", backend)  # still stale: read again
    assert backend.inventory_calls == calls + 1 and inventories.booked("slurm") == []
    await inventories.fresh("slurm", backend)  # fresh now: not read
    assert backend.inventory_calls == calls + 1


async def test_a_failed_submission_frees_its_hosts_at_once() -> None:
    inventories = Inventories(max_age=3600, min_reread=3600)
    await inventories.read("slurm", FakeBackend(inventory()))
    inventories.book("slurm", 7, two_nodes())
    inventories.ended("slurm", 7, submitted=False)
    assert inventories.booked("slurm") == []
    inventories.ended("slurm", 8, submitted=True)  # never booked: nothing to do
    assert inventories.booked("slurm") == []


async def test_overlapping_reads_keep_the_newest_answer_and_later_bookings() -> None:
    """A slow read (refresh_forever's) asked for before a fast one (a placement's)
    answers last: its older answer is ignored and bookings made after both were asked
    for stay."""
    inventories = Inventories(max_age=3600, min_reread=3600)
    backend = Held()
    await inventories.read("slurm", backend)
    gate = backend.gate = asyncio.Event()
    slow = asyncio.create_task(inventories.read("slurm", backend))
    await asyncio.sleep(0)
    fast = FakeBackend(inventory(busy=("node1", "node2")))
    await inventories.read("slurm", fast)
    newest = inventories.get("slurm")
    inventories.book("slurm", 3, two_nodes())
    inventories.ended("slurm", 3, submitted=True)
    gate.set()
    await slow
    assert inventories.get("slurm") is newest
    assert len(inventories.booked("slurm")) == 1


class Gated(FakeBackend):
    """Submissions wait for :attr:`gate`; the inventory shows the submitted jobs'
    hosts busy (as Slurm's would once they run)."""

    def __init__(self) -> None:
        super().__init__(inventory())
        self.gate = asyncio.Event()

    async def submit(self, request: SubmitRequest) -> str:
        await self.gate.wait()
        return await super().submit(request)

    async def inventory(self) -> Inventory:
        self.inventory_calls += 1
        return inventory(busy=[h for r in self.submitted if r.placement
                               for h in r.placement.hosts])


def nodelist_engine(tmp_path: Path, backend: FakeBackend, max_age: float = 3600) -> Engine:
    return Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
                  EngineSettings(default_backend="slurm", placement={"slurm": "nodelist"},
                                 placement_max_age=max_age, placement_min_reread=1.0))


async def drain(e: Engine) -> None:
    while e._inflight:
        await asyncio.gather(*e._inflight.values())


async def test_a_read_while_a_job_is_being_submitted_does_not_free_its_hosts(
        tmp_path: Path) -> None:
    backend = Gated()
    e = nodelist_engine(tmp_path, backend)
    first = e.admit(trainjob(cpus_per_task=2), ALICE)
    await e.reconcile_once()
    for _ in range(5):
        await asyncio.sleep(0)
    assert first.id in e._inflight  # placed and booked; its sbatch has not returned
    await e._inventories.read("slurm", backend)  # a refresh meanwhile: lacks the job
    second = e.admit(trainjob(cpus_per_task=2), BOB)
    await e.reconcile_once()
    backend.gate.set()
    await drain(e)
    hosts = [r.placement.hosts for r in backend.submitted if r.placement]
    assert len(hosts) == 2 and not set(hosts[0]) & set(hosts[1]), hosts
    assert e.store.get(second.id).state is JobState.SUBMITTED
    e.store.close()


async def test_rejected_submissions_leave_no_host_booked(tmp_path: Path) -> None:
    class Rejecting(FakeBackend):
        async def submit(self, request: SubmitRequest) -> str:
            raise BackendRejected("no")

    backend = Rejecting(inventory())
    e = nodelist_engine(tmp_path, backend, max_age=5)
    for _ in range(2):
        rec = e.admit(trainjob(cpus_per_task=2), ALICE)
        await e.reconcile_once()
        await drain(e)
        assert e.store.get(rec.id).state is JobState.FAILED
    assert e._inventories.booked("slurm") == []
    third = e.admit(trainjob(nodes=1), ALICE)
    await e.reconcile_once()
    await drain(e)
    placement = e.store.get(third.id).placement or {}
    assert placement.get("hosts") == ["node1"], placement
    e.store.close()
