"""One user's many due jobs (an array of a thousand tasks) do not all queue in front of
another user's one: at most ``max_parallel_submits`` submissions per user are in flight
(bridge/engine.py), jobs that wait for their topology take no turn, the throttle counts
a task let go while its submission is in flight (bridge/engine_array.py), and acting on
a whole array reads each task afresh (bridge/service.py)."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from pathlib import Path

import pytest

import bridge.service as service_module
from bridge.backend import SubmitRequest
from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.model import ANN_BACKEND
from bridge.nodes import Inventory
from bridge.runtimes import RuntimeCatalog
from bridge.service import ARRAY_STEP, JobService
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, BOB, inventory, new_trainjob
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend
from tests.unit.fakes import settle as fake_settle


class GatedBackend(FakeBackend):
    """Submissions wait until :attr:`gate` is set (a slow sbatch)."""

    def __init__(self) -> None:
        super().__init__(inventory())
        self.gate = asyncio.Event()
        self.started: list[int] = []

    async def submit(self, request: SubmitRequest) -> str:
        self.started.append(request.job_id)
        await self.gate.wait()
        return await super().submit(request)


def engine(tmp_path: Path, backend: GatedBackend, slots: int = 2) -> Engine:
    return Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
                  EngineSettings(default_backend="slurm", max_parallel_submits=slots))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_another_users_job_is_not_queued_behind_an_array(tmp_path: Path) -> None:
    backend = GatedBackend()
    e = engine(tmp_path, backend)
    flood = e.admit(new_trainjob(scheduling={"array": "0-29"}), BOB)
    mine = e.admit(new_trainjob(), ALICE)
    await e.reconcile_once()
    await settle()
    owners = {e.store.get(i).owner.user for i in e._inflight}
    assert mine.id in e._inflight, "alice's job must be in flight in the first pass"
    assert sum(e.store.get(i).owner == BOB for i in e._inflight) == 2
    assert owners == {"alice", "bob"}
    backend.gate.set()  # bob's next ones go as his submissions end, two at a time
    for _ in range(60):
        await settle()
        await e.reconcile_once()
        if all(e.store.get(i).state is JobState.SUBMITTED
               for i in e.store.array_task_ids(flood.id)):
            break
    assert all(e.store.get(i).state is JobState.SUBMITTED
               for i in e.store.array_task_ids(flood.id))
    e.store.close()


async def test_a_capped_users_due_jobs_are_not_read_in_a_pass(tmp_path: Path) -> None:
    """While bob has max_parallel_submits submissions in flight, a pass reads none of
    his other due jobs (a burst of his submissions costs no pass per admission each),
    but alice's job goes, and bob's turn comes when one of his submissions ends."""
    backend = GatedBackend()
    e = engine(tmp_path, backend)
    bobs = [e.admit(new_trainjob(), BOB) for _ in range(6)]
    await e.reconcile_once()
    await settle()
    assert sorted(e._inflight) == [bobs[0].id, bobs[1].id]
    mine = e.admit(new_trainjob(), ALICE)
    # A job of his tried before may be in its back end: it is read whatever his turn.
    tried = e.store.update(bobs[5].id, attempts=1)
    read = spy_on_reads(e)
    await e.reconcile_once()
    await settle()
    assert read == [tried.id, mine.id] and mine.id in e._inflight
    assert e._capped == {BOB.uid}
    backend.gate.set()  # bob's submissions end: each end wakes the loop for his turn
    for _ in range(60):
        await settle()
        await e.reconcile_once()
        if all(e.store.get(r.id).state is JobState.SUBMITTED for r in bobs):
            break
    assert all(e.store.get(r.id).state is JobState.SUBMITTED for r in bobs)
    e.store.close()


def spy_on_reads(e: Engine) -> list[int]:
    """The ids of the engine's full-record reads (``Store.by_ids``) from now on, in
    the list returned."""
    read: list[int] = []
    real = e.store.by_ids

    def spied(ids: list[int]) -> list:  # type: ignore[type-arg]
        read.extend(ids)
        return real(ids)

    e.store.by_ids = spied  # type: ignore[method-assign]
    return read


class PerJobGates(FakeBackend):
    """Each submission waits for its own gate (``gates[job id]``)."""

    def __init__(self) -> None:
        super().__init__(inventory())
        self.gates: dict[int, asyncio.Event] = {}

    async def submit(self, request: SubmitRequest) -> str:
        await self.gates.setdefault(request.job_id, asyncio.Event()).wait()
        return await super().submit(request)


async def test_a_pass_reads_as_many_due_jobs_as_the_user_has_free_turns(
        tmp_path: Path) -> None:
    """Of 30 due jobs and 2 turns, a pass reads 2; the end of one submission wakes the
    loop, whose pass reads 1 (not the other 27)."""
    backend = PerJobGates()
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
               EngineSettings(default_backend="slurm", max_parallel_submits=2))
    bobs = [e.admit(new_trainjob(), BOB) for _ in range(30)]
    read = spy_on_reads(e)
    await e.reconcile_once()
    await settle()
    assert read == [bobs[0].id, bobs[1].id] and sorted(e._inflight) == read
    read.clear()
    e._wake.clear()
    backend.gates.setdefault(bobs[0].id, asyncio.Event()).set()
    await settle()
    assert e._wake.is_set(), "the end of a capped user's submission must wake the loop"
    await e.reconcile_once()
    await settle()
    assert read == [bobs[2].id] and sorted(e._inflight) == [bobs[1].id, bobs[2].id]
    for gate in [*backend.gates.values(), *(backend.gates.setdefault(r.id, asyncio.Event())
                                            for r in bobs)]:
        gate.set()
    e.store.close()


async def test_no_job_waits_behind_jobs_that_cannot_go(tmp_path: Path) -> None:
    """A user's first due jobs wait for their topology: the pass that read only them
    leaves turns free, so the next one, at once, reads the user's other jobs."""
    backend = FakeBackend(inventory(busy=("node1", "node3")))
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
               EngineSettings(default_backend="slurm", max_parallel_submits=2,
                              placement_max_age=3600))
    waiting = [e.admit(trainjob(switches=1, switches_wait_minutes=600), ALICE)
               for _ in range(3)]
    plain = e.admit(trainjob(nodes=1), ALICE)
    e._wake.clear()
    await e.reconcile_once()
    await settle()
    assert not backend.submitted and e._wake.is_set()
    await e.reconcile_once()
    await settle()
    assert [r.job_id for r in backend.submitted] == [plain.id]
    assert all(e.store.get(w.id).reason == "WaitingForTopology" for w in waiting)
    e.store.close()


async def test_two_users_with_jobs_waiting_for_topology_do_not_spin_the_loop(
        tmp_path: Path) -> None:
    """Alice's and Bob's first due jobs wait for their topology (for good), Bob's due
    one pass after Alice's: a pass that follows a wake-up reads every user with a free
    turn in full, so the follow-ups of two users do not wake each other forever."""
    backend = FakeBackend(inventory(busy=("node1", "node3")))
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
               EngineSettings(default_backend="slurm", max_parallel_submits=2,
                              placement_max_age=3600))
    for _ in range(3):
        e.admit(trainjob(switches=1, switches_wait_minutes=600), ALICE)
    e._wake.clear()
    await e.reconcile_once()
    await settle()
    for _ in range(3):
        e.admit(trainjob(switches=1, switches_wait_minutes=600), BOB)
    woken = []
    for _ in range(8):  # as run() does: clear, pass, wait for a wake
        e._wake.clear()
        await e.reconcile_once()
        await settle()
        woken.append(e._wake.is_set())
    assert not backend.submitted
    # A pass may wake one follow-up; a follow-up wakes none (no busy loop).
    assert not any(a and b for a, b in pairwise(woken)), woken
    e.store.close()


class GatedInventory(FakeBackend):
    """A second back end whose inventory read waits for :attr:`gate`."""

    def __init__(self) -> None:
        super().__init__(inventory())
        self.gate = asyncio.Event()

    async def inventory(self) -> Inventory:
        await self.gate.wait()
        return await super().inventory()


class CountingBackend(FakeBackend):
    """Sets :attr:`second` once it has taken two submissions."""

    def __init__(self, inv: Inventory) -> None:
        super().__init__(inv)
        self.second = asyncio.Event()

    async def submit(self, request: SubmitRequest) -> str:
        answer = await super().submit(request)
        if len(self.submitted) >= 2:
            self.second.set()
        return answer


async def test_a_user_whose_submissions_end_during_the_pass_is_woken(
        tmp_path: Path) -> None:
    """Alice (2 turns, 5 due jobs on slurm) has 2 read; both submissions end while the
    pass waits for another back end's inventory: her other 3 must not wait for the
    next poll (the pass sorts her by the submissions still in flight at its end)."""
    slurm, k8s = CountingBackend(inventory()), GatedInventory()
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": slurm, "k8s": k8s},
               RuntimeCatalog(), EngineSettings(default_backend="slurm",
                                                max_parallel_submits=2))
    alice = [e.admit(new_trainjob(), ALICE) for _ in range(5)]
    other = trainjob(nodes=1)
    other.metadata.annotations[ANN_BACKEND] = "k8s"
    e.admit(other, BOB)
    e._wake.clear()
    passing = asyncio.create_task(e.reconcile_once())
    # Her submissions also wait for a worker thread (engine.py: to_thread): no count of
    # loop turns is enough on a busy machine. Both sent, then both ended:
    async with asyncio.timeout(30):
        await slurm.second.wait()
    await asyncio.gather(*(t for i, t in list(e._inflight.items())
                           if i in {a.id for a in alice}))
    assert len(slurm.submitted) == 2 and not any(a.id in e._inflight for a in alice)
    k8s.gate.set()
    await passing
    assert e._wake.is_set(), "alice's other due jobs would wait for the next poll"
    await asyncio.gather(*e._inflight.values())
    e.store.close()


async def test_a_task_in_flight_counts_against_its_throttle(tmp_path: Path) -> None:
    backend = GatedBackend()
    e = engine(tmp_path, backend, slots=1)  # one sbatch at a time: task 1 waits for it
    e.settings = EngineSettings(default_backend="slurm", max_parallel_submits=8)
    array = e.admit(new_trainjob(scheduling={"array": "0-5%2"}), ALICE)
    for _ in range(3):  # task 0 in its sbatch, task 1 waiting for a slot (never tried)
        await e.reconcile_once()
        await settle()
        e._arrays.changed(set(e._inflight), 10**12)  # even a sweep must not let more go
    assert sorted(e._inflight) == [array.id, array.id + 1]
    tasks = [e.store.get(i) for i in e.store.array_task_ids(array.id)]
    assert [t.reason for t in tasks[2:]] == ["JobArrayTaskLimit"] * 4
    e.store.close()


async def test_jobs_waiting_for_their_topology_take_no_turn(tmp_path: Path) -> None:
    """Jobs held for ``--switches`` are not submissions: the user's other jobs go."""
    backend = FakeBackend(inventory(busy=("node1", "node3")))
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
               EngineSettings(default_backend="slurm", max_parallel_submits=2,
                              placement_max_age=0.0))
    waiting = [e.admit(trainjob(switches=1, switches_wait_minutes=600), ALICE)
               for _ in range(2)]
    plain = e.admit(trainjob(nodes=1), ALICE)
    for _ in range(3):
        await fake_settle(e)
    assert [e.store.get(w.id).reason for w in waiting] == ["WaitingForTopology"] * 2
    assert e.store.get(plain.id).state is JobState.SUBMITTED
    e.store.close()


async def test_a_whole_array_is_cancelled_from_fresh_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tcancel A`` yields to the loop every ARRAY_STEP tasks; a task the engine claimed
    meanwhile (its submission in flight) gets a cancel request, not a Cancelled state
    its submission could not follow, and a task that ended meanwhile is skipped."""
    store = Store.open(tmp_path / "s.sqlite")
    e = Engine(store, {"slurm": FakeBackend(inventory())}, RuntimeCatalog(),
               EngineSettings(default_backend="slurm"))
    service = JobService(e, EventFeed(store))
    head = e.admit(new_trainjob(scheduling={"array": "0-99"}), ALICE)
    ids = store.array_task_ids(head.id)
    claimed, ended = ids[ARRAY_STEP + 5], ids[2 * ARRAY_STEP + 1]
    real_sleep = asyncio.sleep

    async def engine_moves(delay: float) -> None:  # what a pass may do meanwhile
        if store.get(claimed).attempts == 0:
            store.claim_submission(claimed, 0, submitting_since=1.0)
        if store.get(ended).state is JobState.PENDING:
            store.claim_submission(ended, 0, submitting_since=1.0)
            store.transition(ended, JobState.FAILED, "SubmitRejected", "no",
                             submitting_since=None)
        await real_sleep(delay)

    monkeypatch.setattr(service_module.asyncio, "sleep", engine_moves)
    await service.apply_to_array(head, ALICE, JobService.cancel)
    in_flight = store.get(claimed)
    assert (in_flight.state, in_flight.cancel_requested) == (JobState.PENDING, True)
    assert store.get(ended).state is JobState.FAILED
    others = [store.get(i).state for i in ids if i not in (claimed, ended)]
    assert others == [JobState.CANCELLED] * 98
    store.close()
