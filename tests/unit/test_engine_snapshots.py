"""A status snapshot costs what changed (issue 13): the engine compares each tracked job's
record and report with what it applied last, and reads and applies only those that
differ or are missing; the suspend pass reads only jobs that may need a suspend sent."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import BackendJob, BackendState, StatusBatch
from bridge.engine import Engine, EngineSettings
from bridge.runtimes import RuntimeCatalog
from bridge.states import JobState
from bridge.store import JobRecord, Store
from tests.unit.builders import ALICE, inventory
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend, settle


class CountingStore(Store):
    """A store that counts the rows :meth:`by_ids` decodes and the snapshots' key reads."""

    read: list[int]
    keyed = 0

    def by_ids(self, ids: Any) -> list[JobRecord]:
        self.read += list(ids)
        return super().by_ids(ids)

    def job_keys(self, states: Any, backend: str) -> list[tuple[int, str, float]]:
        self.keyed += 1
        return super().job_keys(states, backend)


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    store = CountingStore.open(tmp_path / "s.sqlite")
    assert isinstance(store, CountingStore)
    store.read = []
    return Engine(store, {"slurm": FakeBackend(inventory())}, RuntimeCatalog(),
                  EngineSettings(default_backend="slurm", placement={"slurm": "none"},
                                 lost_after_snapshots=2, lost_after_seconds=0.0))


def reads(e: Engine) -> list[int]:
    store = e.store
    assert isinstance(store, CountingStore)
    got, store.read = store.read, []
    return got


def report(rec: JobRecord, state: BackendState = BackendState.RUNNING,
           **fields: Any) -> BackendJob:
    return BackendJob(backend_id=str(rec.backend_id), job_uid=rec.uid, state=state,
                      owner_uid=ALICE.uid, **fields)


async def submitted(e: Engine, n: int) -> list[JobRecord]:
    ids = [e.admit(trainjob(nodes=1), ALICE).id for _ in range(n)]
    await settle(e)
    reads(e)  # the submission pass's own reads are not the snapshots'
    return [e.store.get(i) for i in ids]


async def test_the_same_snapshot_again_reads_no_row(engine: Engine) -> None:
    jobs = await submitted(engine, 3)
    snapshot = tuple(report(r) for r in jobs)
    at = time.time() + 60
    engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at))
    assert sorted(reads(engine)) == [r.id for r in jobs]  # first sight: all read, Running
    assert {engine.store.get(r.id).state for r in jobs} == {JobState.RUNNING}
    engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at + 1))
    assert sorted(reads(engine)) == [r.id for r in jobs]  # their records changed: again
    for step in range(3):
        engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at + 2 + step))
        assert reads(engine) == []  # nothing changed: nothing read


async def test_a_changed_report_or_record_is_applied(engine: Engine) -> None:
    a, b = await submitted(engine, 2)
    at = time.time() + 60
    running = (report(a), report(b))
    for step in range(3):
        engine.apply_status("slurm", StatusBatch(running, complete=True, at=at + step))
    reads(engine)
    done = (report(a, BackendState.COMPLETED, exit_code=0), report(b))
    engine.apply_status("slurm", StatusBatch(done, complete=True, at=at + 5))
    assert reads(engine) == [a.id]
    assert engine.store.get(a.id).state is JobState.SUCCEEDED
    # b's record changes (a reason written elsewhere): read again, though its report did not.
    engine.store.update(b.id, message="touched")
    engine.apply_status("slurm", StatusBatch(done, complete=True, at=at + 6))
    assert reads(engine) == [b.id]


async def test_a_job_missing_from_snapshots_is_still_lost(engine: Engine) -> None:
    a, b = await submitted(engine, 2)
    at = time.time() + 60
    for step in range(3):
        engine.apply_status("slurm", StatusBatch((report(a), report(b)), complete=True,
                                                 at=at + step))
    for step in range(2):  # b gone: read (and counted) at every snapshot
        engine.apply_status("slurm", StatusBatch((report(a),), complete=True, at=at + 10 + step))
    assert (engine.store.get(b.id).state, engine.store.get(b.id).reason) == (
        JobState.FAILED, "BackendLost")
    assert engine.store.get(a.id).state is JobState.RUNNING


async def test_the_same_snapshot_objects_with_nothing_written_are_not_compared(
        engine: Engine) -> None:
    a, b = await submitted(engine, 2)
    store = engine.store
    assert isinstance(store, CountingStore)
    snapshot = (report(a), report(b))  # Slurm's "nothing changed": the very same objects
    at = time.time() + 60
    for step in range(2):
        engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at + step))
    keyed = store.keyed
    for step in range(3):
        engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at + 2 + step))
    # Read at first sight (made Running), then once more (their records changed): no more.
    assert store.keyed == keyed and reads(engine) == [a.id, b.id] * 2
    # Equal but new objects are compared (by key); so is the same snapshot after a write.
    engine.apply_status("slurm", StatusBatch((report(a), report(b)), complete=True,
                                             at=at + 6))
    assert store.keyed == keyed + 1 and reads(engine) == []
    engine.store.update(b.id, message="touched")
    engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at + 7))
    assert store.keyed == keyed + 2 and reads(engine) == [b.id]
    done = (report(a, BackendState.COMPLETED, exit_code=0), snapshot[1])
    engine.apply_status("slurm", StatusBatch(done, complete=True, at=at + 8))
    assert engine.store.get(a.id).state is JobState.SUCCEEDED


async def test_a_job_absent_from_the_same_snapshot_again_is_still_lost(engine: Engine) -> None:
    """A job submitted after the snapshot was taken is not counted missing at first;
    the same snapshot objects again later must still count it (and find it lost)."""
    a, b = await submitted(engine, 2)
    snapshot = (report(a),)
    at = time.time()  # b was just recorded: not missing from a snapshot this old
    engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at))
    assert engine.store.get(b.id).state is JobState.SUBMITTED
    for step in range(2):
        engine.apply_status("slurm", StatusBatch(snapshot, complete=True, at=at + 60 + step))
    assert (engine.store.get(b.id).state, engine.store.get(b.id).reason) == (
        JobState.FAILED, "BackendLost")


async def test_suspend_candidates_are_those_whose_wish_and_world_differ(engine: Engine) -> None:
    """Candidates: a job asking for a suspend its reason does not show, one shown
    suspended that does not ask, one held in its queue; not: one as asked (either way),
    one not yet in its back end, one ended, another back end's."""
    plain, asked, shown, settled, held, ended, waiting = await submitted(engine, 7)

    def ask(job_id: int) -> None:
        job = engine.store.get(job_id).job
        job.spec.suspend = True
        engine.store.save_document(job_id, job)

    ask(asked.id)
    engine.store.update(shown.id, reason="BackendSuspended")
    ask(settled.id)
    engine.store.update(settled.id, reason="Suspended")
    engine.store.update(held.id, held="hold")
    ask(ended.id)
    engine.store.transition(ended.id, JobState.CANCELLED, "Cancelled")
    engine.store.update(waiting.id, backend_id=None)  # not in its back end yet
    ask(waiting.id)
    assert [r.id for r in engine.store.suspend_candidates("slurm")] == [
        asked.id, shown.id, held.id]
    assert engine.store.suspend_candidates("other") == []
    assert plain.id not in [r.id for r in engine.store.suspend_candidates("slurm")]
    # The column follows the summary: asking again to run settles "asked" and makes
    # "settled" a candidate (shown suspended, no longer asked).
    for job_id in (asked.id, settled.id):
        job = engine.store.get(job_id).job
        job.spec.suspend = False
        engine.store.save_document(job_id, job)
    assert [r.id for r in engine.store.suspend_candidates("slurm")] == [
        shown.id, settled.id, held.id]


async def test_a_job_held_in_its_back_end_before_it_ran_is_not_running(engine: Engine) -> None:
    """Suspended in the back end before it ever started (Slurm: held while pending):
    it stays Submitted (reason BackendSuspended), with no start time; one that ran
    and was suspended shows Running/BackendSuspended."""
    from bridge.outcome import outcome

    waiting, ran = await submitted(engine, 2)
    held = BackendJob(backend_id=str(waiting.backend_id), job_uid=waiting.uid,
                      state=BackendState.SUSPENDED, native_state="PENDING")
    move = outcome(engine.store.get(waiting.id), held)
    assert move is not None and (move.state, move.reason) == (JobState.SUBMITTED,
                                                              "BackendSuspended")
    assert "started_at" not in move.fields
    engine.store.update(ran.id, started_at=time.time())
    move = outcome(engine.store.get(ran.id), held)
    assert move is not None and (move.state, move.reason) == (JobState.RUNNING,
                                                              "BackendSuspended")


async def test_a_refused_suspend_stays_the_reason_while_the_job_runs(engine: Engine) -> None:
    from bridge.outcome import SUSPEND_REFUSED, outcome

    [rec] = await submitted(engine, 1)
    job = engine.store.get(rec.id).job
    job.spec.suspend = True  # asked for, and refused
    engine.store.save_document(rec.id, job)
    engine.store.update(rec.id, state=JobState.RUNNING, reason=SUSPEND_REFUSED,
                        started_at=time.time())
    runs = BackendJob(backend_id=str(rec.backend_id), job_uid=rec.uid,
                      state=BackendState.RUNNING, native_state="RUNNING")
    assert outcome(engine.store.get(rec.id), runs) is None
    ended = BackendJob(backend_id=str(rec.backend_id), job_uid=rec.uid,
                       state=BackendState.COMPLETED, native_state="COMPLETED", exit_code=0)
    move = outcome(engine.store.get(rec.id), ended)
    assert move is not None and move.state is JobState.SUCCEEDED
    job.spec.suspend = False  # resumed: the refusal is past, the next report says Running
    engine.store.save_document(rec.id, job)
    move = outcome(engine.store.get(rec.id), runs)
    assert move is not None and move.reason == "Running"


def test_a_status_watch_that_fails_or_ends_is_started_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A back end's watch that raises (a bug in it) or ends must not leave the back end
    without status for the rest of the daemon's life."""
    import asyncio
    from collections.abc import AsyncIterator

    import bridge.engine_status as engine_status
    from bridge.backoff import Backoff

    starts: list[int] = []

    class Flaky(FakeBackend):
        async def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
            starts.append(len(starts))
            yield StatusBatch((), complete=True, at=time.time())
            if len(starts) == 1:
                raise RuntimeError("a bug in the watch")
            if len(starts) == 2:
                return  # ended
            await asyncio.Event().wait()

    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    made: list[Backoff] = []

    def backoff(base: float, cap: float) -> Backoff:
        made.append(Backoff(base, cap, sleep=no_sleep))
        return made[-1]

    monkeypatch.setattr(engine_status, "Backoff", backoff)
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": Flaky(inventory())},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    applied: list[str] = []

    async def go() -> None:
        got = asyncio.Event()

        def apply(name: str, batch: StatusBatch) -> None:
            applied.append(name)
            if len(applied) == 3:
                got.set()
        monkeypatch.setattr(e, "apply_status", apply)
        task = asyncio.create_task(e._track("slurm", e.backends["slurm"]))
        await asyncio.wait_for(got.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert starts == [0, 1, 2] and applied == ["slurm"] * 3
    assert len(waits) == 2  # a back-off before each new start
    # A batch before the failure does not make the watch healthy: each start lists
    # everything again, so the delay keeps growing until a watch runs a while.
    assert made[0].failures == 2


async def test_a_cancelled_job_gone_from_its_back_end_is_cancelled_not_lost(
        engine: Engine) -> None:
    """Slurm keeps no record of a native array's pending task cancelled alone: a job
    whose cancel was asked for and that is gone ends Cancelled (and an incomplete
    reading counts nobody missing)."""
    a, b = await submitted(engine, 2)
    engine.store.request_cancel(b.id)
    at = time.time() + 60
    engine.apply_status("slurm", StatusBatch((report(a),), complete=False, at=at))
    assert engine.store.get(b.id).state is JobState.SUBMITTED  # not counted
    for step in range(2):
        engine.apply_status("slurm", StatusBatch((report(a),), complete=True, at=at + 1 + step))
    assert (engine.store.get(b.id).state, engine.store.get(b.id).reason) == (
        JobState.CANCELLED, "Cancelled")
