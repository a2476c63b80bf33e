"""One user's many due jobs (an array of a thousand tasks) do not all queue in front of
another user's one: at most ``max_parallel_submits`` submissions per user are in flight
(bridge/engine.py ``_fair``), and the throttle counts a task let go while its
submission is in flight (bridge/engine_array.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bridge.backend import SubmitRequest
from bridge.engine import Engine, EngineSettings
from bridge.runtimes import RuntimeCatalog
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, BOB, inventory, new_trainjob
from tests.unit.fakes import FakeBackend


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
