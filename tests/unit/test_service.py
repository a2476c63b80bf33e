"""JobService (bridge/service.py) over a real Store and the engine with a fake back end:
admission (idempotent replay, taken-before adoption), who may change a job, paged
listings, output reading, and the change feed (order, cursors, waking, in-state
updates)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.backend import BackendJob, Owner
from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.runtimes import RuntimeCatalog
from bridge.service import EngineError, JobNotFound, JobService
from bridge.states import JobState
from bridge.store import Store
from tests.unit.test_engine_placement import FakeBackend, inventory, trainjob

ALICE = Owner(uid=1001, gid=1001, user="alice")
BOB = Owner(uid=1002, gid=1002, user="bob")
ROOT = Owner(uid=0, gid=0, user="root")


class OutputBackend(FakeBackend):
    """A fake back end whose jobs' stdout is ``hello``."""

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        data = b"hello"[offset:]
        return data, offset + len(data)


def make_service(tmp_path: Path) -> tuple[JobService, Engine, EventFeed]:
    store = Store.open(tmp_path / "s.sqlite")
    engine = Engine(store, {"slurm": OutputBackend(inventory())}, RuntimeCatalog(),
                    EngineSettings(default_backend="slurm"))
    feed = EventFeed(store, interval=0.005)
    return JobService(engine, feed), engine, feed


@pytest.fixture
def service(tmp_path: Path) -> JobService:
    return make_service(tmp_path)[0]


# -- admission ----------------------------------------------------------------------


def test_admit_stores_a_pending_job_that_find_resolves_for_its_owner(service: JobService
                                                                      ) -> None:
    job = trainjob(nodes=1)
    admitted = service.admit(job, ALICE, prepared=service.prepare(job, ALICE))
    rec = admitted.record
    assert not admitted.replayed and not admitted.conflict
    assert rec.state is JobState.PENDING and rec.owner == ALICE and rec.origin == "api"
    assert service.find(rec.name, None, ALICE).id == rec.id
    assert service.find(str(rec.id), None, BOB).id == rec.id  # ids are global
    assert service.get_by_uid(rec.uid) is not None and service.count_active(ALICE.uid) == 1
    with pytest.raises(JobNotFound):
        service.find("no-such-job", None, ALICE)


def test_an_idempotency_key_replays_the_first_job_and_refuses_another_body(
        service: JobService) -> None:
    first = service.admit(trainjob(nodes=1), ALICE, idempotency_key="k1",
                          request_digest="d1").record
    again = service.replay(ALICE, "k1", "d1")
    assert again is not None and again.replayed and not again.conflict
    assert again.record.id == first.id
    other = service.replay(ALICE, "k1", "d2")
    assert other is not None and other.conflict and other.record.id == first.id
    assert service.replay(BOB, "k1", "d1") is None  # keys are per caller
    assert service.by_idempotency_key(ALICE.uid, "k1") is not None
    # Two retries that both passed the replay: the second answers the first's job.
    raced = service.admit(trainjob(nodes=1), ALICE, idempotency_key="k1",
                          request_digest="d1")
    assert raced.replayed and raced.record.id == first.id
    assert service.count_active(ALICE.uid) == 1


def test_a_job_taken_before_is_looked_up_before_any_submit(service: JobService) -> None:
    rec = service.admit(trainjob(nodes=1), ALICE, origin="kubernetes",
                        taken_before=True).record
    assert rec.attempts == 1 and rec.origin == "kubernetes"
    assert service.admit(trainjob(nodes=1), ALICE).record.attempts == 0


def test_a_duplicate_without_a_key_is_refused(service: JobService) -> None:
    job = trainjob(nodes=1)
    service.admit(job, ALICE)
    with pytest.raises(EngineError):
        service.admit(job, ALICE)


# -- changing a job -----------------------------------------------------------------


def test_cancel_by_another_user_is_refused_and_by_the_owner_done(service: JobService) -> None:
    rec = service.admit(trainjob(nodes=1), ALICE).record
    with pytest.raises(EngineError, match="denied"):
        service.cancel(rec, BOB)
    assert service.get(rec.id).state is JobState.PENDING
    assert service.cancel(rec, ALICE).state is JobState.CANCELLED


def test_suspend_and_resume_a_pending_job(service: JobService) -> None:
    rec = service.admit(trainjob(nodes=1), ALICE).record
    with pytest.raises(EngineError):
        service.suspend(rec, BOB)
    assert service.suspend(rec, ALICE).state is JobState.SUSPENDED
    assert service.resume(service.get(rec.id), ROOT).state is JobState.PENDING


# -- reading ------------------------------------------------------------------------


def test_list_jobs_pages_through_every_job_once(service: JobService) -> None:
    ids = [service.admit(trainjob(nodes=1), ALICE).record.id for _ in range(5)]
    seen: list[int] = []
    after = None
    while True:
        page = service.list_jobs(None, after_id=after, limit=2)
        seen += [r.id for r in page.items]
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == ids
    assert service.list_jobs(None, limit=5).next_after is None
    assert [r.id for r in service.list_jobs([JobState.PENDING], user="alice").items] == ids
    assert service.list_jobs(None, origin="kubernetes").items == []


async def test_read_output_goes_through_the_back_end_for_the_owner_only(
        tmp_path: Path) -> None:
    service, engine, _ = make_service(tmp_path)
    rec = service.admit(trainjob(nodes=1), ALICE).record
    empty = await service.read_output(rec.id, ALICE, "stdout", 0)
    assert empty.data == b"" and empty.offset == 0 and not empty.finished  # not submitted
    # What the engine records on submission:
    engine.store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id="7",
                     stdout_path="/tmp/out", attempts=1)
    chunk = await service.read_output(rec.id, ALICE, "stdout", 1)
    assert (chunk.data, chunk.offset, chunk.finished) == (b"ello", 5, False)
    assert (await service.read_output(rec.id, ROOT, "stderr", 0)).data == b""  # no path
    with pytest.raises(EngineError, match="only the job's owner"):
        await service.read_output(rec.id, BOB, "stdout", 0)
    assert service.jobs_status(rec) is None  # the fake does not report parts


async def test_a_pod_back_end_is_asked_for_the_log_without_an_output_file(
        tmp_path: Path) -> None:
    """A job that runs in pods has no output file: its log is the pod's (tlog)."""
    service, engine, _ = make_service(tmp_path)
    backend = engine.backends["slurm"]
    rec = service.admit(trainjob(nodes=1), ALICE).record
    engine.store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id="ns/j",
                            attempts=1)
    assert (await service.read_output(rec.id, ALICE, "stdout", 0)).data == b""  # no file
    backend.runs_pods = True  # type: ignore[attr-defined]
    chunk = await service.read_output(rec.id, ALICE, "stdout", 1)
    assert (chunk.data, chunk.offset) == (b"ello", 5)


# -- the change feed ----------------------------------------------------------------


def _walk(service: JobService, since: int, limit: int) -> list[int]:
    """Every event id after ``since``, read ``limit`` at a time through cursors."""
    ids: list[int] = []
    while True:
        events, cursor = service.changes(since, limit)
        ids += [e.id for e in events]
        if cursor == since:
            return ids
        since = cursor


def test_changes_come_in_order_and_cursors_never_skip_or_repeat(service: JobService) -> None:
    start = service.cursor()
    recs = [service.admit(trainjob(nodes=1), ALICE).record for _ in range(3)]
    service.cancel(recs[1], ALICE)
    events, cursor = service.changes(start)
    assert [e.job_id for e in events] == [recs[0].id, recs[1].id, recs[2].id, recs[1].id]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert cursor == events[-1].id == service.cursor()
    assert events[-1].payload["to"] == "Cancelled"
    for limit in (1, 2, 3, 100):
        assert _walk(service, start, limit) == [e.id for e in events]
    # A change between two reads is in the second one.
    half, mid = service.changes(start, 2)
    service.cancel(recs[0], ALICE)
    rest, _ = service.changes(mid)
    assert [e.id for e in half + rest] == [e.id for e in events] + [service.cursor()]
    assert service.changes(service.cursor()) == ([], service.cursor())


def test_changes_of_one_owner(service: JobService) -> None:
    mine = service.admit(trainjob(nodes=1), BOB).record
    service.admit(trainjob(nodes=1), ALICE)
    events, cursor = service.changes(0, owner_uid=BOB.uid)
    assert [e.job_id for e in events] == [mine.id] and cursor == service.cursor()


@pytest.fixture
async def fed(tmp_path: Path) -> AsyncIterator[JobService]:
    service, _, feed = make_service(tmp_path)
    task = asyncio.create_task(feed.run())
    yield service
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_the_wait_wakes_on_a_new_change(fed: JobService) -> None:
    cursor = fed.cursor()
    assert not await fed.wait_for_changes(cursor, 0.0)
    waiter = asyncio.create_task(fed.wait_for_changes(cursor, 30.0))
    rec = fed.admit(trainjob(nodes=1), ALICE).record
    assert await asyncio.wait_for(waiter, 30.0)
    events, _ = fed.changes(cursor)
    assert [e.job_id for e in events] == [rec.id]
    # An event already there answers at once.
    assert await fed.wait_for_changes(cursor, 30.0)


def test_updates_name_jobs_changed_within_their_state(tmp_path: Path) -> None:
    service, engine, _ = make_service(tmp_path)
    store: Store = engine.store
    rec = service.admit(trainjob(nodes=1), ALICE).record
    wake = asyncio.Event()
    updates = service.updates(wake)
    store.transition(rec.id, JobState.PENDING, "BackendUnavailable", "down")  # no event
    assert wake.is_set() and updates.take() == {rec.id} and updates.take() == set()
    before = service.cursor()
    assert service.changes(before) == ([], before)
    service.cancel(rec, ALICE)  # a state change: an event, not an update
    assert updates.take() == set() and len(service.changes(before)[0]) == 1
    service.stop_updates(updates)
    store.update(rec.id, message="x")
    assert updates.take() == set()
