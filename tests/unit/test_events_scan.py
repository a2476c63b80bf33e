"""``/v1/events`` for a caller far behind: the scan over other users' events runs in
windows with the event loop free between two (bridge.api_events.owned_after)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bridge.api_events import owned_after
from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.model import TrainJob, ensure_identity, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.service import JobService
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, BOB, inventory
from tests.unit.fakes import FakeBackend


def _job(name: str) -> TrainJob:
    return ensure_identity(load_trainjob({
        "kind": "TrainJob", "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "plain"}, "trainer": {"command": ["true"]}}}))


def _service(store: Store) -> JobService:
    engine = Engine(store, {"slurm": FakeBackend(inventory())}, RuntimeCatalog(),
                    EngineSettings(default_backend="slurm"))
    return JobService(engine, EventFeed(store))


def _history(store: Store) -> tuple[int, int]:
    """Many events of alice's jobs, then one of bob's: (bob's job id, newest seq)."""
    for i in range(20):
        rec = store.add(_job(f"a{i}"), ALICE, "slurm")
        store.transition(rec.id, JobState.CANCELLED, "Cancelled", "cancelled")
    mine = store.add(_job("b"), BOB, "slurm")
    return mine.id, store.last_event_id()


def test_a_scan_behind_other_users_events_lets_the_loop_run(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    bob_job, newest = _history(store)
    assert newest > 40

    async def scan() -> tuple[int, list[int], int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = ticks
        rows, reached = await owned_after(_service(store), 0, newest, 200, BOB.uid, window=5)
        done.set()
        await task
        return ticks - start, [r.job_id for r in rows], reached

    ticks, jobs, reached = asyncio.run(scan())
    assert jobs == [bob_job] and reached == newest
    assert ticks >= (newest - 5) // 5  # the loop ran between every two windows


def test_windows_return_the_same_events_as_one_query(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    _, newest = _history(store)
    whole = store.events_after(0, 1000, upto=newest, owner_uid=ALICE.uid)
    got: list[int] = []
    cursor = 0
    while cursor < newest:
        rows, reached = asyncio.run(owned_after(_service(store), cursor, newest, 7, ALICE.uid,
                                                window=3))
        got += [r.id for r in rows]
        cursor = rows[-1].id if len(rows) == 7 else reached
    assert got == [e.id for e in whole]
    assert asyncio.run(owned_after(_service(store), 0, newest, 5, None))[0] == \
        store.events_after(0, 5, upto=newest)
