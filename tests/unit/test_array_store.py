"""Job arrays in the store (bridge/store.py, bridge/store_arrays.py), the throttle ``%N``
(bridge/engine_array.py), the active-jobs limit for an array (bridge/limits.py) and
acting on every task (bridge/service.py)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.arrays import THROTTLED, ArraySpec, parse, task_uid
from bridge.backend import Owner
from bridge.engine import Engine
from bridge.engine_admission import task_rows
from bridge.engine_array import RECHECK, ArrayThrottle, array_task
from bridge.errors import Conflict, PermissionDenied
from bridge.feed import EventFeed
from bridge.limits import LimitExceeded, LimitSettings, UserLimits
from bridge.model import TrainJob, load_trainjob
from bridge.service import JobService
from bridge.states import JobState
from bridge.store import DuplicateJob, JobNotFound, JobRecord, Store
from bridge.store_arrays import NOT_DUE, parse_task_ref
from tests.unit.builders import ALICE, BOB, new_trainjob

NOW = 1_000_000.0


def array_job(text: str, name: str = "train") -> TrainJob:
    return new_trainjob(name, scheduling={"array": text})


def add_array(store: Store, text: str, *, name: str = "train", throttle_rows: bool = True,
              owner: Owner = ALICE, **kw: Any) -> list[JobRecord]:
    """An array stored as admission stores it (every task, by index); without
    ``throttle_rows`` no task starts waiting (all due, as after a release)."""
    job = array_job(text, name)
    rows = task_rows(job.to_dict(), parse(text))
    if not throttle_rows:
        rows = tuple(dataclasses.replace(r, waiting=None) for r in rows)
    head = store.add(job, owner, "slurm", tasks=rows, **kw)
    return tasks_of(store, head.id)


def tasks_of(store: Store, array_id: int) -> list[JobRecord]:
    return store.by_ids(store.array_task_ids(array_id))


def submit(store: Store, rec: JobRecord, state: JobState = JobState.SUBMITTED) -> None:
    """What the engine does with a task it may submit: claim, then the back end has it."""
    claimed = store.claim_submission(rec.id, rec.attempts)
    assert claimed is not None
    if state is not JobState.PENDING:
        store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id=f"b{rec.id}")
    if state is JobState.RUNNING:
        store.transition(rec.id, JobState.RUNNING, "Running")


def due(store: Store, ids: list[int]) -> list[int]:
    """Those of ``ids`` whose next attempt is due by :data:`NOW` (any later time)."""
    return [r.id for r in store.by_ids(ids) if r.next_attempt_at < NOT_DUE]


# --------------------------------------------------------------------------- storing


def test_tasks_are_stored_together_with_consecutive_ids() -> None:
    store = Store.open(":memory:")
    before = store.add(new_trainjob("plain"), ALICE, "slurm")
    tasks = add_array(store, "1,3,5-6")
    first = tasks[0].id
    assert [t.id for t in tasks] == [first, first + 1, first + 2, first + 3]
    assert first == before.id + 1
    assert all(t.array_job_id == first for t in tasks)
    assert [t.array_task_id for t in tasks] == [1, 3, 5, 6]
    assert [t.display_id for t in tasks] == [f"{first}_{i}" for i in (1, 3, 5, 6)]
    assert [t.name for t in tasks] == ["train-1", "train-3", "train-5", "train-6"]
    assert len({t.uid for t in tasks}) == 4
    assert all(t.summary["array"] == "1,3,5-6" for t in tasks)
    assert before.array_job_id is None and before.array_task_id is None
    assert before.display_id == str(before.id) and array_task(before) is None
    first_task = array_task(tasks[1])
    assert first_task is not None and first_task.spec == ArraySpec((1, 3, 5, 6))
    assert store.count_active(ALICE.uid) == 5
    assert [e.payload["jobId"] for e in store.pending_events()] == [
        before.id, *(t.id for t in tasks)]
    # each task's document is its own
    assert tasks[2].job.metadata.name == "train-5"
    assert tasks[2].job.metadata.uid == tasks[2].uid


def test_first_task_keeps_the_jobs_uid_and_the_others_follow_from_it() -> None:
    store = Store.open(":memory:")
    job = array_job("0-1", name="n" * 40)
    rows = task_rows(job.to_dict(), parse("0-1"))
    assert rows[0].uid == job.metadata.uid
    assert rows[1].uid == task_uid(job.metadata.uid, 1) != job.metadata.uid
    assert [r.name for r in rows] == ["n" * 40 + "-0", "n" * 40 + "-1"]
    head = store.add(job, ALICE, "slurm", tasks=rows)
    assert head.uid == job.metadata.uid and head.name == "n" * 40 + "-0"


def test_every_task_name_is_a_valid_trainjob_name() -> None:
    job = array_job("0-1", name="n" * 63)  # a valid name
    for row in task_rows(job.to_dict(), parse("0-1")):
        assert len(row.name) <= 63
        assert load_trainjob(json.loads(row.document)).metadata.name == row.name


def test_find_a_task_by_array_and_index() -> None:
    store = Store.open(":memory:")
    plain = store.add(new_trainjob("plain"), ALICE, "slurm")
    tasks = add_array(store, "0-15:4")
    a = tasks[0].id
    for t in tasks:
        assert store.find(f"{a}_{t.array_task_id}").id == t.id
        assert store.find(str(t.id)).display_id == t.display_id
    assert store.task_id(a, 8) == tasks[2].id and store.task_id(a, 9) is None
    for ref in (f"{a}_1", f"{a}_16", f"{a + 1}_4", f"{plain.id}_0", "999999_0"):
        with pytest.raises(JobNotFound):
            store.find(ref)
    assert store.array_task_ids(plain.id) == [] and store.array_task_ids(a + 1) == []


@pytest.mark.parametrize(("ref", "parsed"), [
    ("12_3", (12, 3)), ("12_0", (12, 0)), ("1_999999999", (1, 999999999)),
    ("12", None), ("0_1", None), ("12_", None), ("_3", None), ("12_-1", None),
    ("12_3_4", None), ("\uff11_2", None), ("1_1234567890", None), (" 1_2", None),
])
def test_parse_task_ref(ref: str, parsed: tuple[int, int] | None) -> None:
    assert parse_task_ref(ref) == parsed


def test_tasks_past_the_throttle_start_waiting() -> None:
    store = Store.open(":memory:")
    tasks = add_array(store, "0-5%2")
    assert all(t.state is JobState.PENDING and t.attempts == 0 for t in tasks)
    assert [t.reason for t in tasks] == ["Created"] * 2 + [THROTTLED] * 4
    assert [t.next_attempt_at for t in tasks] == [0.0] * 2 + [NOT_DUE] * 4
    assert [store.transitions(t.id)[0].reason for t in tasks] == (
        ["Created"] * 2 + [THROTTLED] * 4)
    assert [r.id for r in store.list_jobs(due_by=NOW)] == [tasks[0].id, tasks[1].id]
    assert store.waiting_tasks(tasks[0].id, 3, THROTTLED) == [t.id for t in tasks[2:5]]
    assert store.arrays_waiting(THROTTLED) == [tasks[0].id]


def test_idempotency_key_only_on_the_first_task() -> None:
    store = Store.open(":memory:")
    tasks = add_array(store, "0-2", idempotency_key="key-1", request_digest="d" * 64)
    assert [t.idempotency_key for t in tasks] == ["key-1", None, None]
    assert [t.request_digest for t in tasks] == ["d" * 64, None, None]
    found = store.by_idempotency_key(ALICE.uid, "key-1")
    assert found is not None and found.id == tasks[0].id
    with pytest.raises(DuplicateJob):
        add_array(store, "0-2", name="other", idempotency_key="key-1")


def test_a_refused_array_stores_no_task() -> None:
    store = Store.open(":memory:")
    add_array(store, "2")
    count = len(store.list_jobs())
    events = len(store.pending_events())
    with pytest.raises(DuplicateJob):
        add_array(store, "0-3")  # train-2 is taken: the whole array is refused
    assert len(store.list_jobs()) == count
    assert len(store.pending_events()) == events
    assert len(add_array(store, "0-3", owner=BOB)) == 4  # names are per owner


def test_in_backend_counts_submitted_running_and_tried() -> None:
    store = Store.open(":memory:")
    t = add_array(store, "0-6", throttle_rows=False)
    submit(store, t[0])
    submit(store, t[1], JobState.RUNNING)
    submit(store, t[2], JobState.PENDING)  # tried, maybe in the back end
    submit(store, t[3])
    store.transition(t[3].id, JobState.SUCCEEDED, "Completed", exit_code=0)
    store.transition(t[4].id, JobState.SUSPENDED, "JobHeldUser")
    store.transition(t[5].id, JobState.CANCELLED, "Cancelled")
    assert sorted(store.array_in_backend(t[0].id)) == [t[0].id, t[1].id, t[2].id]


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 1000), min_size=1, max_size=40),
       st.none() | st.integers(1, 50))
def test_any_array_is_stored_as_its_tasks(indexes: set[int], limit: int | None) -> None:
    store = Store.open(":memory:")
    spec = ArraySpec(tuple(sorted(indexes)), limit)
    tasks = add_array(store, spec.text())
    a = tasks[0].id
    assert [t.id for t in tasks] == list(range(a, a + len(indexes)))
    assert [t.array_task_id for t in tasks] == sorted(indexes)
    for k, t in enumerate(tasks):
        assert t.array_job_id == a
        assert store.find(t.display_id).id == t.id
        waiting = limit is not None and k >= limit
        assert (t.reason == THROTTLED) is waiting
        assert (t.next_attempt_at == NOT_DUE) is waiting
        task = array_task(t)
        assert task is not None and task.spec == spec and task.job_id == a


# --------------------------------------------------------------------------- throttle


def test_split_lets_at_most_n_through_and_holds_the_rest() -> None:
    store = Store.open(":memory:")
    plain = store.add(new_trainjob("plain"), ALICE, "slurm")
    free = add_array(store, "0-3", name="free", throttle_rows=False)
    t = add_array(store, "0-5%2", throttle_rows=False)
    throttle = ArrayThrottle(store)
    ready = throttle.split(store.list_jobs(due_by=NOW), NOW)
    assert [r.id for r in ready] == [plain.id, *(r.id for r in free), t[0].id, t[1].id]
    for held in store.by_ids([r.id for r in t[2:]]):
        assert held.state is JobState.PENDING
        assert held.reason == THROTTLED and held.next_attempt_at == NOT_DUE
        assert "%2" in held.message
    assert throttle.watching
    # the engine's next pass: the two (not yet claimed) go again, nothing more
    again = throttle.split(store.list_jobs(due_by=NOW), NOW)
    assert [r.id for r in again] == [plain.id, *(r.id for r in free), t[0].id, t[1].id]


def test_split_counts_tasks_already_in_their_back_end() -> None:
    store = Store.open(":memory:")
    t = add_array(store, "0-6%3", throttle_rows=False)
    submit(store, t[0])
    submit(store, t[1], JobState.RUNNING)
    submit(store, t[2], JobState.PENDING)  # a retry: still counted, and still goes
    throttle = ArrayThrottle(store)
    recs = store.list_jobs(states=[JobState.PENDING], due_by=NOW)
    assert [r.id for r in throttle.split(recs, NOW)] == [t[2].id]
    assert [r.reason for r in store.by_ids([r.id for r in t[3:]])] == [THROTTLED] * 4
    assert due(store, [r.id for r in t[3:]]) == []


def test_split_lets_cancelled_and_tried_tasks_go() -> None:
    store = Store.open(":memory:")
    t = add_array(store, "0-3%1", throttle_rows=False)
    submit(store, t[0])
    store.request_cancel(t[1].id)
    recs = store.by_ids([t[1].id, t[2].id])
    assert [r.id for r in ArrayThrottle(store).split(recs, NOW)] == [t[1].id]


def test_an_end_makes_exactly_the_freed_tasks_due_lowest_index_first() -> None:
    store = Store.open(":memory:")
    t = add_array(store, "0-7%3")
    throttle = ArrayThrottle(store)
    for rec in throttle.split(store.list_jobs(due_by=NOW), NOW):
        submit(store, rec, JobState.RUNNING)
    waiting = [r.id for r in t[3:]]
    throttle.changed(set(), NOW)  # the first call looks at every array: nothing free
    assert due(store, waiting) == []
    throttle.changed({t[1].id}, NOW + 1)  # still running: nothing freed
    assert due(store, waiting) == []
    store.transition(t[1].id, JobState.SUCCEEDED, "Completed", exit_code=0)
    throttle.changed({t[1].id}, NOW + 2)
    assert due(store, waiting) == [t[3].id]
    assert store.get(t[3].id).next_attempt_at == NOW + 2
    store.transition(t[0].id, JobState.FAILED, "NonZeroExitCode", exit_code=1)
    store.transition(t[2].id, JobState.CANCELLED, "Cancelled")
    throttle.changed({t[0].id, t[2].id}, NOW + 3)
    assert due(store, waiting) == [t[3].id, t[4].id, t[5].id]
    assert [store.get(i).next_attempt_at for i in waiting[:3]] == [NOW + 3] * 3
    # the engine submits those three: the array is full again
    recs = store.list_jobs(states=[JobState.PENDING], due_by=NOW + 3)
    assert [r.id for r in throttle.split(recs, NOW + 3)] == waiting[:3]


def test_a_restart_sweeps_on_the_first_call() -> None:
    store = Store.open(":memory:")
    t = add_array(store, "0-5%2")
    old = ArrayThrottle(store)
    for rec in old.split(store.list_jobs(due_by=NOW), NOW):
        submit(store, rec)
    store.transition(t[0].id, JobState.SUCCEEDED, "Completed", exit_code=0)
    store.transition(t[1].id, JobState.SUCCEEDED, "Completed", exit_code=0)
    # the daemon stopped before it heard of the ends: a new throttle on the same store
    new = ArrayThrottle(store)
    assert not new.watching
    new.changed(set(), NOW)
    assert due(store, [r.id for r in t[2:]]) == [t[2].id, t[3].id]
    assert new.watching


def test_the_sweep_comes_back_every_recheck() -> None:
    store = Store.open(":memory:")
    t = add_array(store, "0-3%1")
    throttle = ArrayThrottle(store)
    for rec in throttle.split(store.list_jobs(due_by=NOW), NOW):
        submit(store, rec)
    throttle.changed(set(), NOW)  # the first sweep
    store.transition(t[0].id, JobState.SUCCEEDED, "Completed", exit_code=0)  # not heard
    throttle.changed(set(), NOW + 1)
    assert due(store, [r.id for r in t[1:]]) == []
    throttle.changed(set(), NOW + RECHECK)
    assert due(store, [r.id for r in t[1:]]) == [t[1].id]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 5), st.data())
def test_an_array_runs_every_task_in_order_never_over_its_limit(
        count: int, limit: int, data: st.DataObject) -> None:
    store = Store.open(":memory:")
    t = add_array(store, f"0-{count - 1}%{limit}")
    a = t[0].id
    throttle = ArrayThrottle(store)
    order: list[int] = []
    now = NOW
    for _ in range(4 * count + 4):
        now += 1
        for rec in throttle.split(store.list_jobs(states=[JobState.PENDING], due_by=now), now):
            submit(store, rec, JobState.RUNNING)
            assert rec.array_task_id is not None
            order.append(rec.array_task_id)
        running = store.array_in_backend(a)
        assert len(running) <= limit
        if not running:
            break
        ended = data.draw(st.sets(st.sampled_from(sorted(running)), min_size=1))
        for job_id in ended:
            store.transition(job_id, JobState.SUCCEEDED, "Completed", exit_code=0)
        throttle.changed(ended, now)
    assert order == list(range(count))
    assert {r.state for r in tasks_of(store, a)} == {JobState.SUCCEEDED}


# --------------------------------------------------------------------------- limits


def test_an_array_counts_every_task_against_max_active_jobs() -> None:
    limits = UserLimits(LimitSettings(max_active_jobs=10))
    limits.check_active(1002, "bob", 2, adding=8)
    limits.check_active(1002, "bob", 0, adding=10)
    with pytest.raises(LimitExceeded) as info:
        limits.check_active(1002, "bob", 3, adding=8)
    message = str(info.value)
    assert "an array of 8 tasks would make 11" in message
    assert "limits.max_active_jobs = 10" in message
    assert info.value.limit == "max_active_jobs" and info.value.retry_after >= 1
    with pytest.raises(LimitExceeded, match="an array of 11 tasks"):
        limits.check_active(1002, "bob", 0, adding=11)
    with pytest.raises(LimitExceeded, match="bob has 10,"):
        limits.check_active(1002, "bob", 10)
    limits.check_active(0, "root", 10, adding=1000)
    UserLimits(LimitSettings(max_active_jobs=0)).check_active(1002, "bob", 5, adding=10**6)
    assert limits.take_hits() == {"bob": {"max_active_jobs": 3}}


# --------------------------------------------------------------------------- service


async def test_apply_to_array_acts_on_every_task_and_skips_conflicts() -> None:
    store = Store.open(":memory:")
    t = add_array(store, "0-3")
    service = JobService(cast(Engine, SimpleNamespace(store=store)), cast(EventFeed, None))
    seen: list[int | None] = []

    def cancel_odd(svc: JobService, rec: JobRecord, caller: Owner) -> JobRecord:
        seen.append(rec.array_task_id)
        if rec.array_task_id in (0, 2):
            raise Conflict(f"task {rec.array_task_id}")
        return store.transition(rec.id, JobState.CANCELLED, "Cancelled")

    head = await service.apply_to_array(t[0], ALICE, cancel_odd)
    assert seen == [0, 1, 2, 3] and head.id == t[0].id
    assert [r.state for r in tasks_of(store, t[0].id)] == [
        JobState.PENDING, JobState.CANCELLED, JobState.PENDING, JobState.CANCELLED]

    def refuse(svc: JobService, rec: JobRecord, caller: Owner) -> JobRecord:
        raise Conflict(f"task {rec.array_task_id}")

    with pytest.raises(Conflict, match="task 0"):
        await service.apply_to_array(t[0], ALICE, refuse)

    def deny(svc: JobService, rec: JobRecord, caller: Owner) -> JobRecord:
        seen.append(rec.array_task_id)
        raise PermissionError("no")

    seen.clear()
    with pytest.raises(PermissionError):
        await service.apply_to_array(t[0], BOB, deny)
    assert seen == [0]

    def admin_held(svc: JobService, rec: JobRecord, caller: Owner) -> JobRecord:
        if rec.array_task_id == 1:
            raise PermissionDenied("an administrator's hold")
        return rec

    assert (await service.apply_to_array(t[0], ALICE, admin_held)).id == t[0].id

    def all_admin_held(svc: JobService, rec: JobRecord, caller: Owner) -> JobRecord:
        raise PermissionDenied("an administrator's hold")

    with pytest.raises(PermissionDenied):  # applied to none: the first error
        await service.apply_to_array(t[0], ALICE, all_admin_held)
