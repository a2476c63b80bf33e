"""k8s_adapter.trainjob_events: the Event recorded on a TrainJob for each change of its
job, from records moved through the state machine as the engine moves them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.states import JobState
from bridge.store import Store
from k8s_adapter.trainjob_events import event_body, event_key, event_reason
from tests.unit.test_k8s_status import TIME, add, in_state

TRAINJOB = {"metadata": {"name": "train", "namespace": "team-a", "resourceVersion": "42",
                         "uid": "00000000-0000-4000-8000-000000000099"}}
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store.open(":memory:")
    yield s
    s.close()


def test_body_is_a_core_v1_event_on_the_trainjob(store: Store) -> None:
    body = event_body(in_state(store, JobState.RUNNING), TRAINJOB, "kubernetes@host", NOW)
    assert body["apiVersion"] == "v1" and body["kind"] == "Event"
    assert body["metadata"] == {"generateName": "train.", "namespace": "team-a"}
    assert body["involvedObject"] == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "train",
        "namespace": "team-a", "uid": TRAINJOB["metadata"]["uid"], "resourceVersion": "42"}
    # The Kubeflow SDK lists events by firstTimestamp (and skips those without one).
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-01-01T00:00:00Z"
    assert TIME.fullmatch(body["firstTimestamp"])
    assert body["count"] == 1 and body["source"] == {"component": "hpc-bridge"}
    assert (body["reportingComponent"], body["reportingInstance"]) == (
        "hpc-bridge", "kubernetes@host")
    assert (body["reason"], body["type"]) == ("Running", "Normal")
    assert body["message"] == "Running on kwok-node-1"


@pytest.mark.parametrize(("state", "reason", "kind"), [
    (JobState.PENDING, "Admitted", "Normal"),
    (JobState.SUSPENDED, "Suspended", "Normal"),
    (JobState.SUBMITTED, "Submitted", "Normal"),
    (JobState.RUNNING, "Running", "Normal"),
    (JobState.SUCCEEDED, "Completed", "Normal"),
    (JobState.FAILED, "NonZeroExitCode", "Warning"),
    (JobState.CANCELLED, "Cancelled", "Normal"),
])
def test_reason_and_type_per_state(store: Store, state: JobState, reason: str,
                                   kind: str) -> None:
    rec = in_state(store, state)
    body = event_body(rec, TRAINJOB, "i", NOW)
    assert (body["reason"], body["type"]) == (reason, kind) == (event_reason(rec), kind)
    assert body["message"]
    assert event_key(rec) == (state.value, rec.reason)


def test_why_a_job_waits_and_where_it_went(store: Store) -> None:
    rec = add(store)
    admitted = event_body(rec, TRAINJOB, "i", NOW)
    assert admitted["message"] == f"admitted as job {rec.id} for back end kubernetes"
    rec = store.transition(rec.id, JobState.PENDING, "BackendUnavailable", "apiserver down")
    body = event_body(rec, TRAINJOB, "i", NOW)
    assert (body["reason"], body["type"], body["message"]) == (
        "BackendUnavailable", "Warning", "apiserver down")
    store.update(rec.id, attempts=1)
    rec = store.transition(rec.id, JobState.SUBMITTED, "Submitted", "queued",
                           backend_id="team-a/train")
    assert event_body(rec, TRAINJOB, "i", NOW)["message"] == (
        "queued (kubernetes job team-a/train)")
    rec = store.transition(rec.id, JobState.RUNNING, "Running", "started",
                           nodes=[f"n{i}" for i in range(20)])
    message = event_body(rec, TRAINJOB, "i", NOW)["message"]
    assert message.startswith("started on n0,n1,") and message.endswith("n15 …")


def test_message_is_bounded(store: Store) -> None:
    rec = add(store)
    rec = store.transition(rec.id, JobState.PENDING, "Priority", "x" * 5000)
    assert len(event_body(rec, TRAINJOB, "i", NOW)["message"]) == 1024
