"""k8s_adapter.status: a stored job → the status of its TrainJob CR.

Records come from a real in-memory Store moved through the state machine, as the
engine moves them; each written status must also be a valid TrainJobStatus.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.model import TrainJobStatus, load_trainjob
from bridge.states import JobState
from bridge.store import JobRecord, Store
from k8s_adapter.status import (
    desired_conditions,
    desired_status,
    failed_status,
    same_status,
    synthetic_jobs_status,
)
from tests.unit.builders import ALICE

OLD = "2000-01-01T00:00:00Z"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
# metav1.Condition's rule for reason.
REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
JOBS_FIELDS = {"name", "ready", "succeeded", "failed", "active", "suspended"}


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store.open(":memory:")
    yield s
    s.close()


_count = 0


def add(store: Store, *, suspend: bool = False, state: JobState = JobState.PENDING) -> JobRecord:
    global _count
    _count += 1
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"},
                            "trainer": {"numNodes": 2, "command": ["torchrun", "t.py"]}}
    if suspend:
        spec["suspend"] = True
    job = load_trainjob({"metadata": {"name": f"job-{_count}", "namespace": "team-a",
                                      "uid": f"00000000-0000-4000-8000-{_count:012d}"},
                         "spec": spec})
    return store.add(job, ALICE, "kubernetes", origin="kubernetes", state=state)


def in_state(store: Store, state: JobState, *, suspend: bool = False) -> JobRecord:
    """A job moved to ``state`` the way the engine moves it."""
    if state is JobState.SUSPENDED:
        rec = add(store, suspend=True)
        return store.transition(rec.id, JobState.SUSPENDED, "Suspended", "spec.suspend")
    rec = add(store, suspend=suspend)
    if state is JobState.PENDING:
        return rec
    store.update(rec.id, attempts=1)
    rec = store.transition(rec.id, JobState.SUBMITTED, "Submitted", "JobSet created",
                           backend_id="team-a/x")
    if state is JobState.SUBMITTED:
        return rec
    if state is JobState.CANCELLED:
        return store.transition(rec.id, JobState.CANCELLED, "Cancelled", "Deleted")
    rec = store.transition(rec.id, JobState.RUNNING, "Running", "Running on kwok-node-1",
                           started_at=rec.updated_at, nodes=["kwok-node-1"])
    if state is JobState.RUNNING:
        return rec
    if state is JobState.SUCCEEDED:
        return store.transition(rec.id, JobState.SUCCEEDED, "Completed", "exit code 0",
                                exit_code=0)
    assert state is JobState.FAILED
    return store.transition(rec.id, JobState.FAILED, "NonZeroExitCode", "exit code 3",
                            exit_code=3)


def ts(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def shape(conds: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in conds]


# The table of the module docstring: Trainer v2.3's conditions only.
TABLE = {
    JobState.PENDING: [],
    JobState.SUSPENDED: [("Suspended", "True")],
    JobState.SUBMITTED: [],
    JobState.RUNNING: [],
    JobState.SUCCEEDED: [("Complete", "True")],
    JobState.FAILED: [("Failed", "True")],
    JobState.CANCELLED: [("Failed", "True")],
}


@pytest.mark.parametrize("state", list(JobState))
def test_conditions_per_state(store: Store, state: JobState) -> None:
    rec = in_state(store, state)
    conds = desired_conditions(rec)
    assert shape(conds) == TABLE[state]
    for c in conds:
        assert TIME.fullmatch(c["lastTransitionTime"])
        assert REASON.fullmatch(c["reason"]), c
        assert isinstance(c["message"], str)
    # Every status the door writes is one the TrainJob model accepts.
    TrainJobStatus.model_validate(desired_status(rec, None, None))


def sdk_status(conditions: list[dict[str, Any]], nodes_running: bool) -> str:
    """What the Kubeflow SDK (kubeflow 0.5.0, TrainerClient) reports for a TrainJob
    (its KubernetesBackend: Complete/Failed from conditions; Running only without any
    condition, from the pods)."""
    status = "Created"
    if conditions:
        for c in conditions:
            if c["type"] in ("Complete", "Failed") and c["status"] == "True":
                status = c["type"]
    elif nodes_running:
        status = "Running"
    return status


@pytest.mark.parametrize("state", list(JobState))
def test_the_kubeflow_sdk_reads_each_state(store: Store, state: JobState) -> None:
    rec = in_state(store, state)
    expected = {JobState.RUNNING: "Running", JobState.SUCCEEDED: "Complete",
                JobState.FAILED: "Failed", JobState.CANCELLED: "Failed"}.get(state, "Created")
    running_pods = state is JobState.RUNNING
    assert sdk_status(desired_status(rec, None, None)["conditions"], running_pods) == expected


def test_suspend_then_resume_as_trainer_writes_it(store: Store) -> None:
    rec = in_state(store, JobState.SUSPENDED)
    held = desired_status(rec, None, None)
    [cond] = held["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "Suspended", "True", "Suspended", "TrainJob is suspended")
    rec = store.transition(rec.id, JobState.PENDING, "Created", "resumed")
    resumed = desired_status(rec, None, held)
    [cond] = resumed["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "Suspended", "False", "Resumed", "TrainJob is resumed")
    # Resumed stays; the end comes after it, and the State column reads the end.
    store.update(rec.id, attempts=1)
    rec = store.transition(rec.id, JobState.SUBMITTED, "Submitted", "queued")
    assert shape(desired_status(rec, None, resumed)["conditions"]) == [("Suspended", "False")]
    rec = store.transition(rec.id, JobState.SUCCEEDED, "Completed", "exit code 0")
    done = desired_status(rec, None, resumed)["conditions"]
    assert shape(done) == [("Suspended", "False"), ("Complete", "True")]
    # Held again in the back end, then cancelled while held: the hold's record stands.
    again = in_state(store, JobState.RUNNING, suspend=True)
    again = store.transition(again.id, JobState.RUNNING, "Suspended", "held in slurm")
    held = desired_status(again, None, None)
    again = store.transition(again.id, JobState.CANCELLED, "Cancelled", "tcancel")
    conds = desired_status(again, None, held)["conditions"]
    assert shape(conds) == [("Suspended", "True"), ("Failed", "True")]



def test_resumed_and_finished_between_two_writes_is_not_left_suspended(store: Store) -> None:
    """Trainer never writes Suspended=True beside Complete: a job that ran to its end
    was resumed, even when the door saw the hold and then only the end."""
    rec = in_state(store, JobState.SUSPENDED)
    held = desired_status(rec, None, None)
    job = rec.job
    job.spec.suspend = False  # resumed as the engine resumes it (bridge/engine_hold.py)
    rec = store.transition(rec.id, JobState.PENDING, "Resumed", "resumed",
                           **store.document_fields(job))
    store.update(rec.id, attempts=1)
    rec = store.transition(rec.id, JobState.SUCCEEDED, "Completed", "exit code 0")
    assert not rec.suspend_requested
    conds = desired_status(rec, None, held)["conditions"]
    assert [(c["type"], c["status"], c["reason"]) for c in conds] == [
        ("Suspended", "False", "Resumed"), ("Complete", "True", "Completed")]


def test_an_older_bridges_conditions_are_dropped(store: Store) -> None:
    rec = in_state(store, JobState.RUNNING)
    old = {"conditions": [
        {"type": "Created", "status": "True", "reason": "Admitted", "message": "",
         "lastTransitionTime": OLD},
        {"type": "Running", "status": "True", "reason": "Running", "message": "",
         "lastTransitionTime": OLD}]}
    status = desired_status(rec, None, old)
    assert status["conditions"] == [] and not same_status(status, old)


def test_finished_reasons_and_messages(store: Store) -> None:
    failed = desired_conditions(in_state(store, JobState.FAILED))[-1]
    assert (failed["reason"], failed["message"]) == ("NonZeroExitCode", "exit code 3")
    cancelled = desired_conditions(in_state(store, JobState.CANCELLED))[-1]
    assert cancelled["reason"] == "Cancelled"
    rec = in_state(store, JobState.SUCCEEDED)
    complete = desired_conditions(rec)[-1]
    assert complete["reason"] == "Completed"
    assert rec.finished_at is not None
    assert complete["lastTransitionTime"] == ts(rec.finished_at)
    trainer = desired_status(rec, None, None)["trainerStatus"]
    assert trainer["progressPercentage"] == 100 and trainer["estimatedRemainingSeconds"] == 0
    assert "trainerStatus" not in desired_status(in_state(store, JobState.RUNNING), None, None)


def test_running_but_held_is_suspended(store: Store) -> None:
    """What the world shows: asked for but not yet sent (or refused) is still running;
    sent (reason Suspended) or shown by the back end (BackendSuspended) is suspended."""
    asked = in_state(store, JobState.RUNNING, suspend=True)
    assert desired_conditions(asked) == []
    assert synthetic_jobs_status(asked)[0]["suspended"] == 0
    refused = store.transition(asked.id, JobState.RUNNING, "SuspendRefused", "refused")
    assert synthetic_jobs_status(refused)[0]["ready"] == 1
    assert desired_conditions(refused) == []
    rec = store.transition(asked.id, JobState.RUNNING, "Suspended", "suspended in slurm")
    [cond] = desired_conditions(rec)
    assert (cond["type"], cond["status"]) == ("Suspended", "True")
    [entry] = synthetic_jobs_status(rec)
    assert entry["suspended"] == 1 and entry["active"] == 0 and entry["ready"] == 0


def test_transition_time_kept_while_status_unchanged(store: Store) -> None:
    rec = in_state(store, JobState.SUSPENDED)
    previous = desired_status(rec, None, None)
    for c in previous["conditions"]:
        c["lastTransitionTime"] = OLD
    rec = store.transition(rec.id, JobState.SUSPENDED, "Suspended", "still held")
    status = desired_status(rec, None, previous)
    assert status["conditions"][0]["lastTransitionTime"] == OLD  # True → True: kept
    rec = store.transition(rec.id, JobState.PENDING, "Created", "resumed")
    resumed = desired_status(rec, None, status)
    assert resumed["conditions"][0]["lastTransitionTime"] == ts(rec.updated_at)  # → False
    # Written again unchanged: nothing moves.
    again = desired_status(rec, None, resumed)
    assert again == resumed and same_status(again, resumed)


def test_same_status_ignores_transition_times(store: Store) -> None:
    rec = in_state(store, JobState.FAILED)
    a = desired_status(rec, None, None)
    b = desired_status(rec, None, None)
    for c in b["conditions"]:
        c["lastTransitionTime"] = OLD
    b["conditions"].reverse()
    assert same_status(a, b)
    changed = desired_status(rec, None, None)
    changed["conditions"][-1]["message"] = "something else"
    assert not same_status(a, changed)
    reason = desired_status(rec, None, None)
    reason["conditions"][-1]["reason"] = "Other"
    assert not same_status(a, reason)
    counts = desired_status(rec, [{"name": "node", "ready": 1, "succeeded": 0, "failed": 0,
                                   "active": 2, "suspended": 0}], None)
    assert not same_status(a, counts)
    assert not same_status(a, None) and same_status(None, {})
    done = desired_status(in_state(store, JobState.SUCCEEDED), None, None)
    assert not same_status(a, done)
    running = desired_status(in_state(store, JobState.RUNNING), None, None)
    assert not same_status(a, running)


@pytest.mark.parametrize("state", list(JobState))
def test_synthetic_jobs_status_shape(store: Store, state: JobState) -> None:
    rec = in_state(store, state)
    entries = desired_status(rec, None, None)["jobsStatus"]
    assert entries == synthetic_jobs_status(rec)
    [entry] = entries
    assert set(entry) == JOBS_FIELDS and entry["name"] == "node"
    counts = {k: v for k, v in entry.items() if k != "name"}
    assert all(type(v) is int and v in (0, 1) for v in counts.values()), entry
    expected = {
        JobState.PENDING: {}, JobState.SUSPENDED: {"suspended": 1},
        JobState.SUBMITTED: {"active": 1}, JobState.RUNNING: {"active": 1, "ready": 1},
        JobState.SUCCEEDED: {"succeeded": 1}, JobState.FAILED: {"failed": 1},
        JobState.CANCELLED: {"failed": 1},
    }[state]
    assert {k: v for k, v in counts.items() if v} == expected


def test_never_submitted_failure_counts_no_failed_job(store: Store) -> None:
    rec = add(store)
    rec = store.transition(rec.id, JobState.FAILED, "Refused", "bad partition")
    assert rec.attempts == 0
    assert synthetic_jobs_status(rec)[0]["failed"] == 0


def test_backend_jobs_status_is_used_as_given(store: Store) -> None:
    rec = in_state(store, JobState.RUNNING)
    given = [{"name": "launcher", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
              "suspended": 0}]
    status = desired_status(rec, given, None)
    assert status["jobsStatus"] == given and status["jobsStatus"][0] is not given[0]
    assert desired_status(rec, [], None)["jobsStatus"] == []


def test_a_jobset_not_reported_on_yet_keeps_the_counts_written_before(store: Store) -> None:
    """Pending: the synthetic ``node`` entry; the new JobSet's empty report changes
    nothing (no write of an empty list, then of the JobSet's first counts); its
    report, once there, is used as given."""
    rec = add(store)
    pending = desired_status(rec, None, None)
    rec = store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id="ns/j")
    assert same_status(desired_status(rec, [], pending), pending)
    given = [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 1,
              "suspended": 0}]
    assert desired_status(rec, given, pending)["jobsStatus"] == given


def test_failed_status() -> None:
    status = failed_status("spec.trainer.image: required", "InvalidSpec", None)
    [cond] = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Failed", "True", "InvalidSpec")
    assert cond["message"] == "spec.trainer.image: required"
    assert TIME.fullmatch(cond["lastTransitionTime"])
    assert status["jobsStatus"] == []
    TrainJobStatus.model_validate(status)
    prior = {"conditions": [{**cond, "lastTransitionTime": OLD}]}
    kept = failed_status("another message", "InvalidSpec", prior)
    assert kept["conditions"][0]["lastTransitionTime"] == OLD
    not_failed = {"conditions": [{**cond, "status": "False", "lastTransitionTime": OLD}]}
    assert failed_status("m", "R", not_failed)["conditions"][0]["lastTransitionTime"] != OLD
    assert len(failed_status("x" * 40000, "R", None)["conditions"][0]["message"]) == 32768
