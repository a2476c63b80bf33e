"""k8s_adapter.jobset_status: a JobSet as the back end's job (state, nodes, failure
messages) and the TrainJob's ``jobsStatus``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bridge.backend import BackendRejected, BackendState
from k8s_adapter.jobset import UID_LABEL
from k8s_adapter.jobset_status import (
    backend_job_from_jobset,
    container_failure,
    failure_message,
    replicated_jobs_status,
    split_id,
)
from tests.unit.builders import UID
from tests.unit.jobset_helpers import render, trainjob

# --------------------------------------------------------------------------- status


def _observed(status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    body = render(trainjob())
    body["metadata"].update(meta)
    if status is not None:
        body["status"] = status
    return body


def _cond(ctype: str, status: str = "True", **extra: Any) -> dict[str, Any]:
    return {"type": ctype, "status": status, **extra}


def _rjs(**counts: int) -> dict[str, Any]:
    return {"replicatedJobsStatus": [{"name": "node", **counts}]}


@pytest.mark.parametrize(("obj", "deleted", "state", "native"), [
    (_observed({"conditions": [_cond("Completed")]}), False, BackendState.COMPLETED,
     "Completed"),
    (_observed({"conditions": [_cond("Failed", reason="FailedJobs", message="node failed")]}),
     False, BackendState.FAILED, "Failed"),
    (_observed({"conditions": [_cond("Completed", "False"), _cond("Failed")]}), False,
     BackendState.FAILED, "Failed"),
    (_observed(_rjs(active=1)), True, BackendState.CANCELLED, "Deleted"),
    (_observed(_rjs(active=1), deletionTimestamp="2024-01-01T00:00:00Z"), False,
     BackendState.CANCELLED, "Deleted"),
    (_observed({"conditions": [_cond("Completed")]}), True, BackendState.COMPLETED,
     "Completed"),
    (_observed({"conditions": [_cond("Suspended")]}), False, BackendState.SUSPENDED,
     "Suspended"),
    (_observed({"conditions": [_cond("Suspended", "False")], **_rjs(active=2)}), False,
     BackendState.RUNNING, "Running"),
    (_observed(_rjs(ready=1)), False, BackendState.RUNNING, "Running"),
    (_observed(_rjs(active=0, ready=0, succeeded=0)), False, BackendState.PENDING, "Pending"),
    (_observed(), False, BackendState.PENDING, "Pending"),
])
def test_backend_job_from_jobset(obj: dict[str, Any], deleted: bool, state: BackendState,
                                 native: str) -> None:
    bj = backend_job_from_jobset(obj, deleted=deleted)
    assert bj is not None
    assert bj.state is state and bj.native_state == native
    assert bj.job_uid == UID and bj.backend_id == "team-a/train" and bj.queue == "team-a"
    if state is BackendState.COMPLETED:
        assert bj.exit_code == 0
    if state is BackendState.FAILED and obj["status"]["conditions"][-1].get("reason"):
        assert bj.reason == "FailedJobs: node failed"
    if state is BackendState.PENDING:
        assert bj.reason == "JobSetCreated"


def test_suspended_spec_is_suspended() -> None:
    body = render(trainjob(suspend=True))
    assert backend_job_from_jobset(body).state is BackendState.SUSPENDED  # type: ignore[union-attr]


def test_nodes_and_foreign_jobsets() -> None:
    bj = backend_job_from_jobset(_observed({"hpcBridgeNodes": ["kwok-node-1"], **_rjs(ready=1)}))
    assert bj is not None and bj.nodes == ("kwok-node-1",)
    foreign = _observed()
    del foreign["metadata"]["labels"][UID_LABEL]
    assert backend_job_from_jobset(foreign) is None
    assert backend_job_from_jobset({}) is None


def test_replicated_jobs_status_shape() -> None:
    obj = {"status": {"replicatedJobsStatus": [
        {"name": "launcher", "ready": 1, "active": 1},
        {"name": "node", "succeeded": "2", "failed": None, "suspended": 0, "extra": "x"}]}}
    assert replicated_jobs_status(obj) == [
        {"name": "launcher", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
         "suspended": 0},
        {"name": "node", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]
    assert replicated_jobs_status({}) == []
    assert replicated_jobs_status({"status": None}) == []


def test_split_id() -> None:
    assert split_id("team-a/train") == ("team-a", "train")
    for bad in ("train", "/train", "team-a/", ""):
        with pytest.raises(BackendRejected):
            split_id(bad)


def test_failure_message() -> None:
    pods: list[dict[str, Any]] = [{"metadata": {"name": "p0"}, "status": {"phase": "Running"}},
            {"metadata": {"name": "p1"}, "status": {"phase": "Failed", "containerStatuses": [
                {"name": "node", "state": {"terminated": {"exitCode": 3, "reason": "Error",
                                                          "message": "boom"}}}]}}]
    assert failure_message(pods) == "pod p1: container node Error, exit code 3: boom"
    assert failure_message(pods[:1]) is None


def test_a_container_restarted_in_its_pod_is_a_failure() -> None:
    """restartPolicy OnFailure: the pod stays Running; its last termination says why."""
    restarted = {"metadata": {"name": "p0"}, "status": {"phase": "Running", "containerStatuses": [
        {"name": "node", "restartCount": 1, "state": {"running": {}},
         "lastState": {"terminated": {"exitCode": 7, "reason": "Error"}}}]}}
    assert container_failure(restarted) == (7, "container node Error, exit code 7")
    clean = copy.deepcopy(restarted)
    clean["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] = 0
    assert container_failure(clean) is None
    done = copy.deepcopy(restarted)
    done["status"]["phase"] = "Succeeded"
    assert container_failure(done) is None


@pytest.mark.parametrize("key", ["volumeClaimPolicies", "failurePolicy", "managedBy"])
def test_a_patch_reaches_replicated_jobs_only(key: str) -> None:
    """Trainer's JobSetSpecPatch has replicatedJobs only: a patch that sets another
    JobSet field is refused naming it (a claim policy would bind any volume)."""
    patch = {"manager": "me", "trainingRuntimeSpec": {"template": {"spec": {
        key: [{"templates": [{"metadata": {"name": "d"}, "spec": {"volumeName": "pv"}}]}]}}}}
    with pytest.raises(BackendRejected, match=f"template.spec.{key}: not a field"):
        render(trainjob(patches=[patch]))
