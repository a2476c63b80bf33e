"""The engine holds a job until its --dependency is met (bridge/engine_dependency.py),
with a real store and a fake back end: held, woken by a change, never satisfied,
killed, restored after a restart, singleton, and refused at admission."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bridge.engine import Engine, EngineSettings
from bridge.engine_dependency import CHECKS_PER_PASS
from bridge.model import ValidationError
from bridge.runtimes import RuntimeCatalog
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, BOB, inventory
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend, settle


def make_engine(path: Path, store: Store | None = None) -> Engine:
    return Engine(store or Store.open(path), {"slurm": FakeBackend(inventory())},
                  RuntimeCatalog(),
                  EngineSettings(default_backend="slurm", placement={"slurm": "none"}))


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return make_engine(tmp_path / "s.sqlite")


def submitted(e: Engine) -> list[int]:
    backend = e.backends["slurm"]
    assert isinstance(backend, FakeBackend)
    return [r.job_id for r in backend.submitted]


def admit(e: Engine, owner: Any = ALICE, **options: Any) -> int:
    return e.admit(trainjob(nodes=1, **options), owner).id


def finish(e: Engine, job_id: int, state: JobState) -> None:
    e.store.transition(job_id, JobState.RUNNING, "Running", started_at=1.0)
    e.store.transition(job_id, state, state.value)


async def test_afterok_holds_until_the_job_succeeds(engine: Engine) -> None:
    first = admit(engine)
    second = admit(engine, dependency=f"afterok:{first}")
    await settle(engine)
    assert submitted(engine) == [first]
    held = engine.store.get(second)
    assert (held.state, held.reason) == (JobState.PENDING, "Dependency")
    assert held.message == f"waiting for dependency afterok:{first}"
    await settle(engine)  # nothing changed: still held, and not looked at again
    assert submitted(engine) == [first]
    finish(engine, first, JobState.SUCCEEDED)
    await settle(engine)
    assert submitted(engine) == [first, second]
    assert engine.store.get(second).reason != "Dependency"


async def test_never_satisfied_stays_pending_or_is_killed(engine: Engine) -> None:
    first = admit(engine)
    waits = admit(engine, dependency=f"afterok:{first}")
    killed = admit(engine, dependency=f"afterok:{first}", kill_on_invalid_dep=True)
    other = admit(engine, dependency=f"afternotok:{first}")
    await settle(engine)
    finish(engine, first, JobState.FAILED)
    await settle(engine)
    assert submitted(engine) == [first, other]
    rec = engine.store.get(waits)
    assert (rec.state, rec.reason) == (JobState.PENDING, "DependencyNeverSatisfied")
    rec = engine.store.get(killed)
    assert (rec.state, rec.reason) == (JobState.CANCELLED, "DependencyNeverSatisfied")
    # A held job can be cancelled at once (it never reached a back end).
    engine.cancel(engine.store.get(waits), ALICE)
    assert engine.store.get(waits).state is JobState.CANCELLED


async def test_a_restart_finds_held_jobs_again(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    e = make_engine(path)
    first = admit(e)
    second = admit(e, dependency=f"afterany:{first}")
    await settle(e)
    finish(e, first, JobState.CANCELLED)  # ... while no engine watches
    again = make_engine(path, e.store)
    await settle(again)
    assert submitted(again) == [second]


async def test_singleton_runs_one_job_of_a_name_at_a_time(engine: Engine) -> None:
    first = admit(engine, job_name="nightly", dependency="singleton")
    second = admit(engine, job_name="nightly", dependency="singleton")
    bobs = admit(engine, BOB, job_name="nightly", dependency="singleton")
    await settle(engine)
    assert submitted(engine) == [first, bobs]  # bob's own name space
    finish(engine, first, JobState.SUCCEEDED)
    await settle(engine)
    assert submitted(engine) == [first, bobs, second]


async def test_a_resumed_held_job_is_looked_at_again(engine: Engine) -> None:
    first = admit(engine)
    second = admit(engine, dependency=f"afterok:{first}")
    await settle(engine)
    engine.set_suspend(engine.store.get(second), True, ALICE)
    finish(engine, first, JobState.SUCCEEDED)
    await settle(engine)
    assert submitted(engine) == [first]  # suspended: waits
    engine.set_suspend(engine.store.get(second), False, ALICE)
    await settle(engine)
    assert submitted(engine) == [first, second]


def test_admission_refuses_a_job_that_does_not_exist(engine: Engine) -> None:
    with pytest.raises(ValidationError, match="job 99 does not exist"):
        admit(engine, dependency="afterok:99")
    assert engine.store.list_jobs() == []


async def test_singleton_waits_for_a_later_job_that_runs(engine: Engine) -> None:
    """As Slurm: a job of the same user and name in its back end blocks, whatever its id
    (an attacker's review)."""
    gate = admit(engine)
    first = admit(engine, job_name="n", dependency=f"singleton,afterany:{gate}")
    later = admit(engine, job_name="n")
    await settle(engine)
    assert submitted(engine) == [gate, later]
    finish(engine, gate, JobState.SUCCEEDED)
    engine.store.transition(later, JobState.RUNNING, "Running", started_at=2.0)
    await settle(engine)
    assert submitted(engine) == [gate, later]  # "later" runs: "first" waits for it
    engine.store.transition(later, JobState.SUCCEEDED, "Succeeded")
    await settle(engine)
    assert submitted(engine) == [gate, later, first]


async def test_a_resumed_job_is_due_at_once_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    e = make_engine(path)
    first = admit(e)
    second = admit(e, dependency=f"afterok:{first}")
    await settle(e)
    e.set_suspend(e.store.get(second), True, ALICE)
    finish(e, first, JobState.SUCCEEDED)
    again = make_engine(path, e.store)
    await settle(again)
    again.set_suspend(again.store.get(second), False, ALICE)
    await settle(again)
    assert submitted(again) == [second]


async def test_an_unreadable_stored_dependency_holds_the_job(engine: Engine) -> None:
    job = admit(engine, dependency="singleton")
    summary = {**engine.store.get(job).summary, "dependency": "sometime:1"}
    engine.store.update(job, summary=json.dumps(summary))
    await settle(engine)
    assert submitted(engine) == []
    rec = engine.store.get(job)
    assert rec.reason == "DependencyNeverSatisfied" and "unreadable" in rec.message


async def test_checks_per_pass_are_bounded(engine: Engine) -> None:
    # Turns enough that one pass reads every due job (with 8, the first pass reads 8).
    engine.settings = replace(engine.settings, max_parallel_submits=10_000)
    first = admit(engine)
    held = [admit(engine, dependency=f"afterok:{first}") for _ in range(CHECKS_PER_PASS + 5)]
    await settle(engine)
    reasons = [engine.store.get(i).reason for i in held]
    assert reasons.count("Dependency") == CHECKS_PER_PASS
    await settle(engine)
    assert {engine.store.get(i).reason for i in held} == {"Dependency"}


async def test_a_wait_on_a_whole_array_wakes_on_its_combined_change_only(
        engine: Engine) -> None:
    """``afterok:A`` watches the array, not each task: a task's end that leaves the
    array unfinished wakes nothing (a thousand held tasks are not checked a thousand
    times each); the last end does."""
    array = admit(engine, array="0-2")
    waiting = admit(engine, dependency=f"afterok:{array}")
    await settle(engine)
    assert engine.store.get(waiting).reason == "Dependency"
    tasks = engine.store.array_task_ids(array)
    for task in tasks:  # all start: the array's facts change (it started), once
        engine.store.transition(task, JobState.RUNNING, "Running", started_at=1.0)
    await settle(engine)
    assert engine.store.get(waiting).reason == "Dependency"
    engine.store.transition(tasks[0], JobState.SUCCEEDED, "Succeeded")
    engine.store.transition(tasks[1], JobState.SUCCEEDED, "Succeeded")
    engine._dependencies.wake(100.0)
    assert engine.store.get(waiting).next_attempt_at > 100.0  # not made due
    engine.store.transition(tasks[2], JobState.SUCCEEDED, "Succeeded")
    engine._dependencies.wake(200.0)
    assert engine.store.get(waiting).next_attempt_at == 200.0
    await settle(engine)
    assert waiting in submitted(engine)


def test_an_array_named_many_times_is_read_once_a_pass(engine: Engine) -> None:
    array = admit(engine, array="0-99")
    text = ":".join([str(array)] * 200)
    held = [admit(engine, dependency=f"afterany:{text}") for _ in range(3)]
    reads: list[int] = []
    store = engine.store
    original = store.array_task_ids

    def counted(array_id: int) -> list[int]:
        reads.append(array_id)
        return original(array_id)

    store.array_task_ids = counted  # type: ignore[method-assign]
    engine._dependencies.split([store.get(i) for i in held], 1.0)
    assert reads == [array]  # one read for three jobs naming it 200 times each
