"""A dependency on jobs already in the same Slurm goes to Slurm with Slurm's ids
(bridge/engine_dependency.py, issue 12 item 3), with a real store and fake back ends:
``slurm`` takes native dependencies, ``other`` does not."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import (
    BackendJob,
    BackendRejected,
    BackendState,
    StatusBatch,
    SubmitRequest,
)
from bridge.engine import Engine, EngineSettings
from bridge.engine_dependency import DependencyUnmet
from bridge.model import ANN_BACKEND
from bridge.runtimes import RuntimeCatalog
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, inventory
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend, settle


class NativeBackend(FakeBackend):
    native_dependencies = True


class RefusingBackend(NativeBackend):
    """Slurm that has purged every job a dependency names."""

    async def submit(self, request: SubmitRequest) -> str:
        if request.dependency:
            raise BackendRejected("Batch job submission failed: Job dependency problem")
        return await super().submit(request)


def make_engine(path: Path, slurm: FakeBackend | None = None, confirmed: bool = True
                ) -> Engine:
    e = Engine(Store.open(path),
               {"slurm": slurm or NativeBackend(inventory()), "other": FakeBackend(inventory())},
               RuntimeCatalog(),
               EngineSettings(default_backend="slurm",
                              placement={"slurm": "none", "other": "none"}))
    if confirmed:  # as after its first complete status snapshot
        e._status.confirmed.add("slurm")
    return e


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return make_engine(tmp_path / "s.sqlite")


def admit(e: Engine, backend: str | None = None, **options: Any) -> int:
    job = trainjob(nodes=1, **options)
    if backend is not None:
        job.metadata.annotations[ANN_BACKEND] = backend
    return e.admit(job, ALICE).id


def sent(e: Engine, backend: str = "slurm") -> dict[int, str | None]:
    """Bridge id -> the dependency its submission carried."""
    b = e.backends[backend]
    assert isinstance(b, FakeBackend)
    return {r.job_id: r.dependency for r in b.submitted}


def finish(e: Engine, job_id: int, state: JobState) -> None:
    if e.store.get(job_id).state is not JobState.RUNNING:
        e.store.transition(job_id, JobState.RUNNING, "Running", started_at=1.0)
    e.store.transition(job_id, state, state.value)


async def test_a_job_in_slurm_is_waited_for_by_slurm(engine: Engine) -> None:
    first = admit(engine)
    await settle(engine)
    slurm_id = engine.store.get(first).backend_id
    second = admit(engine, dependency=f"afterok:{first}", kill_on_invalid_dep=True)
    after = admit(engine, dependency=f"after:{first}+5")
    await settle(engine)
    assert sent(engine)[second] == f"afterok:{slurm_id}"
    assert sent(engine)[after] == f"after:{slurm_id}+5"
    rec = engine.store.get(second)
    assert rec.state is JobState.SUBMITTED
    assert f"its dependency is slurm's: afterok:{slurm_id}" in rec.message


async def test_a_job_not_in_slurm_yet_is_held_then_handed_over(engine: Engine) -> None:
    first = admit(engine)
    engine.set_suspend(engine.store.get(first), True, ALICE)
    second = admit(engine, dependency=f"afterok:{first}")
    await settle(engine)
    assert sent(engine) == {}
    assert engine.store.get(second).reason == "Dependency"
    engine.set_suspend(engine.store.get(first), False, ALICE)
    await settle(engine)  # the first goes to Slurm ...
    await settle(engine)  # ... and its arrival wakes the second
    slurm_id = engine.store.get(first).backend_id
    assert sent(engine) == {first: None, second: f"afterok:{slurm_id}"}


async def test_met_conditions_are_left_out_and_never_met_ones_of_any_of(
        engine: Engine) -> None:
    done, failed, live = admit(engine), admit(engine), admit(engine)
    await settle(engine)
    finish(engine, done, JobState.SUCCEEDED)
    finish(engine, failed, JobState.FAILED)
    live_id = engine.store.get(live).backend_id
    both = admit(engine, dependency=f"afterany:{done},afterok:{live}")
    either = admit(engine, dependency=f"afterok:{failed}?afternotok:{live}")
    await settle(engine)
    assert sent(engine)[both] == f"afterok:{live_id}"
    assert sent(engine)[either] == f"afternotok:{live_id}"


async def test_what_slurm_cannot_see_stays_with_the_bridge(engine: Engine) -> None:
    elsewhere = admit(engine, backend="other")
    array = admit(engine, array="0-1")
    await settle(engine)
    cross = admit(engine, dependency=f"afterok:{elsewhere}")  # another back end's job
    whole = admit(engine, dependency=f"afterok:{array}")  # every task of an array
    task = admit(engine, dependency=f"afterok:{array}_1")  # one task: a Slurm job
    first_single = admit(engine, job_name="n")
    single = admit(engine, job_name="n", dependency=f"afterok:{array}_1,singleton")
    await settle(engine)
    task_id = engine.store.get(engine.store.task_id(array, 1) or 0).backend_id
    assert sent(engine)[task] == f"afterok:{task_id}"
    for held in (cross, whole):
        assert held not in sent(engine)
        assert engine.store.get(held).reason == "Dependency"
    assert single not in sent(engine) and first_single in sent(engine)


async def test_the_dependency_is_read_again_at_each_attempt(engine: Engine) -> None:
    """A retry hands over what is true then: met (none), still waiting (Slurm's ids),
    or no longer expressible (DependencyUnmet: the job waits in the bridge again)."""
    first = admit(engine)
    await settle(engine)
    second = admit(engine, dependency=f"afterok:{first}")
    rec = engine.store.get(second)
    gate = engine._dependencies
    assert gate.native(rec) == f"afterok:{engine.store.get(first).backend_id}"
    finish(engine, first, JobState.FAILED)
    with pytest.raises(DependencyUnmet):
        gate.native(rec)
    third = admit(engine, dependency=f"afternotok:{first}")
    assert gate.native(engine.store.get(third)) is None  # met
    assert gate.native(engine.store.get(first)) is None  # has none


async def test_a_claimed_job_whose_dependency_moved_waits_again(engine: Engine) -> None:
    first = admit(engine)
    await settle(engine)
    second = admit(engine, dependency=f"afterok:{first}")
    # Let the pass hand it over, then fail the first before the submission reads it.
    gate = engine._dependencies
    split = gate.split

    def racing(records: Any, now: float | None = None) -> Any:
        ready = split(records, now)
        if any(r.id == second for r in ready):
            finish(engine, first, JobState.FAILED)
        return ready

    gate.split = racing  # type: ignore[method-assign]
    await settle(engine)
    assert second not in sent(engine)
    rec = engine.store.get(second)
    assert (rec.state, rec.reason, rec.submitting_since, rec.attempts) == (
        JobState.PENDING, "Dependency", None, 0)  # as never tried: the gate holds it
    gate.split = split  # type: ignore[method-assign]
    await settle(engine)  # attempted once, yet held by the gate: never satisfied
    assert engine.store.get(second).reason == "DependencyNeverSatisfied"
    assert second not in sent(engine)


async def test_slurms_kill_on_invalid_dep_reads_as_sbatchs_reason(engine: Engine) -> None:
    first = admit(engine)
    await settle(engine)
    second = admit(engine, dependency=f"afterok:{first}", kill_on_invalid_dep=True)
    other = admit(engine)
    await settle(engine)
    killed = [BackendJob(backend_id=engine.store.get(j).backend_id or "", job_uid=
                         engine.store.get(j).uid, state=BackendState.CANCELLED,
                         native_state="CANCELLED", reason=reason)
              for j, reason in ((second, "DependencyNeverSatisfied"), (other, "None"))]
    engine.apply_status("slurm", StatusBatch(tuple(killed), complete=False, at=time.time()))
    assert engine.store.get(second).reason == "DependencyNeverSatisfied"
    assert engine.store.get(other).reason == "CancelledInBackend"


async def test_singleton_stays_with_the_bridge(engine: Engine) -> None:
    """Slurm cannot see the bridge's held jobs of a name, and a later one may reach
    Slurm first: a dependency with ``singleton`` is never handed over."""
    first = admit(engine)
    await settle(engine)
    single = admit(engine, job_name="nightly", dependency=f"afterok:{first},singleton")
    await settle(engine)
    assert single not in sent(engine)
    assert engine.store.get(single).reason == "Dependency"


async def test_nothing_is_handed_over_before_the_status_is_confirmed(tmp_path: Path
                                                                      ) -> None:
    """After a start, a job the store calls live may have ended and been purged."""
    engine = make_engine(tmp_path / "s.sqlite", confirmed=False)
    first = admit(engine)
    await settle(engine)
    second = admit(engine, dependency=f"afterok:{first}")
    await settle(engine)
    assert second not in sent(engine)
    assert engine.store.get(second).reason == "Dependency"
    engine.apply_status("slurm", StatusBatch((), complete=True, at=time.time()))
    finish(engine, first, JobState.SUCCEEDED)
    await settle(engine)
    assert sent(engine)[second] is None  # met: released by the bridge


async def test_a_job_held_before_the_status_was_confirmed_goes_once_it_is(
        tmp_path: Path) -> None:
    """Nothing it waits for changes: the first whole status alone hands it to Slurm, in
    Slurm's ids (it would otherwise wait in the bridge until the job it names ends)."""
    engine = make_engine(tmp_path / "s.sqlite", confirmed=False)
    first = admit(engine)
    await settle(engine)
    second = admit(engine, dependency=f"afterok:{first}")
    await settle(engine)
    assert second not in sent(engine)
    engine.apply_status("slurm", StatusBatch((), complete=True, at=time.time()))
    await settle(engine)
    assert sent(engine)[second] == f"afterok:{engine.store.get(first).backend_id}"


async def test_a_refused_dependency_waits_in_the_bridge(tmp_path: Path) -> None:
    """Slurm answers "Job dependency problem" (it purged the job named): the job is not
    failed; it waits again, as never tried, and is looked at again later."""
    engine = make_engine(tmp_path / "s.sqlite", RefusingBackend(inventory()))
    first = admit(engine)
    await settle(engine)
    second = admit(engine, dependency=f"afterok:{first}")
    before = time.time()
    await settle(engine)
    rec = engine.store.get(second)
    assert (rec.state, rec.reason, rec.attempts) == (JobState.PENDING, "Dependency", 0)
    assert "refused the dependency" in rec.message and "Job dependency problem" in rec.message
    assert rec.next_attempt_at >= before + 30
