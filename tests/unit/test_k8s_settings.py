"""Settings of the Kubernetes back end and front door, the TrainJob document the door
stores, and how apiserver errors are classified (k8s_adapter.kube)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from bridge.backend import BackendRejected, BackendUnavailable
from bridge.model import MANAGED_BY, load_trainjob
from k8s_adapter import backend as k8s_backend
from k8s_adapter import frontdoor
from k8s_adapter.kube import KubeRejected, api_message, classify, is_status

# --------------------------------------------------------------------------- back end


def test_backend_defaults() -> None:
    b = k8s_backend.create("k8s", {})
    assert b.name == "k8s"
    assert b.kube.settings.kubeconfig is None and b.kube.settings.request_timeout == 10.0
    assert b.options.default_image is None
    assert b.options.topology_labels == k8s_backend.DEFAULT_TOPOLOGY_LABELS


def test_backend_settings_are_used() -> None:
    b = k8s_backend.create("k8s", {
        "kubeconfig": "/etc/kube.conf", "context": "bed", "default_image": "img:1",
        "service_account": "runner", "scheduler_name": "gang", "request_timeout": 3,
        "watch_timeout": 60,
        "topology_labels": ["topology.hpc-bridge.io/block", "topology.hpc-bridge.io/rack"]})
    s = b.kube.settings
    assert (s.kubeconfig, s.context, s.request_timeout, s.watch_timeout) == (
        "/etc/kube.conf", "bed", 3.0, 60)
    o = b.options
    assert (o.default_image, o.service_account, o.scheduler_name) == ("img:1", "runner", "gang")
    assert o.topology_labels == ("topology.hpc-bridge.io/block", "topology.hpc-bridge.io/rack")


@pytest.mark.parametrize(("value", "expected"), [
    ("topology.hpc-bridge.io/block, topology.hpc-bridge.io/rack,kubernetes.io/hostname",
     ("topology.hpc-bridge.io/block", "topology.hpc-bridge.io/rack", "kubernetes.io/hostname")),
    ("a,,b, ", ("a", "b")),
    ("", ()),
    ([], ()),
    (["kubernetes.io/hostname"], ("kubernetes.io/hostname",)),
])
def test_backend_topology_labels(value: Any, expected: tuple[str, ...]) -> None:
    assert k8s_backend.create("k8s", {"topology_labels": value}).options.topology_labels == (
        expected)


@pytest.mark.parametrize("value", [["a", 1], {"a": "b"}, 5, [None]])
def test_backend_malformed_topology_labels(value: Any) -> None:
    with pytest.raises(ValueError, match="topology_labels"):
        k8s_backend.create("k8s", {"topology_labels": value})


def test_backend_refuses_unknown_settings_naming_them() -> None:
    with pytest.raises(ValueError) as err:
        k8s_backend.create("k8s", {"kubeconfig": "/x", "namespace": "a", "imgae": "b"})
    text = str(err.value)
    assert "backends.k8s" in text and "imgae" in text and "namespace" in text
    assert "default_image" in text  # the known ones are listed
    assert "kubeconfig, " not in text.split(";")[0]  # known settings are not blamed


# --------------------------------------------------------------------------- front door


def test_frontdoor_defaults() -> None:
    door = frontdoor.create("trainjobs", {})
    s = door.settings
    assert s.managed_by == (MANAGED_BY,) and s.backend is None and s.allowed_backends == ()
    assert s.run_as == "nobody" and dict(s.namespace_users) == {}
    assert s.kube.kubeconfig is None


def test_frontdoor_settings_are_used() -> None:
    door = frontdoor.create("trainjobs", {
        "kubeconfig": "/k", "context": "c", "managed_by": ["a.io/x", "b.io/y"],
        "backend": "k8s", "allowed_backends": "slurm", "run_as": "svc",
        "namespace_users": {"team-a": "alice"}, "status_interval": 2, "request_timeout": 4})
    s = door.settings
    assert s.managed_by == ("a.io/x", "b.io/y") and s.backend == "k8s"
    assert s.allowed_backends == ("slurm",) and s.run_as == "svc"
    assert dict(s.namespace_users) == {"team-a": "alice"} and s.status_interval == 2.0
    assert (s.kube.kubeconfig, s.kube.context, s.kube.request_timeout) == ("/k", "c", 4.0)


def test_frontdoor_refuses_unknown_settings_naming_them() -> None:
    with pytest.raises(ValueError) as err:
        frontdoor.create("trainjobs", {"backend": "k8s", "managedBy": ["a"]})
    assert "frontdoors.trainjobs" in str(err.value) and "managedBy" in str(err.value)


@pytest.mark.parametrize("users", [{"team-a": 1001}, {"team-a": None}, ["alice"], "alice",
                                   {"team-a": ["alice"]}])
def test_frontdoor_namespace_users_must_map_to_strings(users: Any) -> None:
    with pytest.raises(ValueError, match="namespace_users"):
        frontdoor.create("trainjobs", {"namespace_users": users})


@pytest.mark.parametrize("key", ["managed_by", "allowed_backends"])
def test_frontdoor_lists_of_strings(key: str) -> None:
    with pytest.raises(ValueError, match=key):
        frontdoor.create("trainjobs", {key: ["ok", 3]})


def test_document_strips_server_fields() -> None:
    obj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {
            "name": "train", "namespace": "team-a", "uid": "u-1", "labels": {"a": "b"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                frontdoor.ANN_REFUSED: "3", "keep": "me"},
            "managedFields": [{"manager": "kubectl"}], "resourceVersion": "123",
            "generation": 4, "finalizers": [frontdoor.FINALIZER],
            "deletionTimestamp": "2024-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0,
            "selfLink": "/x", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"managedBy": MANAGED_BY, "runtimeRef": {"name": "plain"},
                 "trainer": {"command": ["echo", "hi"]}},
        "status": {"conditions": [{"type": "Created", "status": "True"}]},
    }
    before = copy.deepcopy(obj)
    doc = frontdoor._document(obj)
    assert obj == before  # the watched object is left alone
    assert "status" not in doc
    assert doc["metadata"] == {"name": "train", "namespace": "team-a", "uid": "u-1",
                               "labels": {"a": "b"}, "annotations": {"keep": "me"},
                               "creationTimestamp": "2024-01-01T00:00:00Z"}
    assert doc["spec"] == obj["spec"]
    # What remains is a TrainJob the bridge loads.
    assert load_trainjob(doc).metadata.uid == "u-1"
    bare = frontdoor._document({"spec": {}, "metadata": {"name": "x", "annotations": None}})
    assert bare["metadata"] == {"name": "x", "annotations": None}


# --------------------------------------------------------------------------- kube errors


def api_error(status: int | None, reason: str = "Reason", body: Any = None) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    return exc


def status_body(message: str, code: int) -> str:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": message, "reason": "Invalid", "code": code})


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_server_errors_are_unavailable(status: int) -> None:
    err = classify(api_error(status, "Service Unavailable",
                             status_body("etcdserver: request timed out", status)),
                   "create JobSet team-a/train")
    assert isinstance(err, BackendUnavailable) and not isinstance(err, BackendRejected)
    assert "create JobSet team-a/train" in str(err)
    assert "etcdserver: request timed out" in str(err)


@pytest.mark.parametrize("exc", [ConnectionRefusedError("connection refused"),
                                 TimeoutError(), OSError("no route"),
                                 api_error(None, "no status")])
def test_errors_without_status_are_unavailable(exc: BaseException) -> None:
    err = classify(exc, "list nodes")
    assert isinstance(err, BackendUnavailable)
    assert "list nodes" in str(err)
    assert str(err).rstrip() != "Kubernetes API: list nodes:"  # says something


@pytest.mark.parametrize("status", [401, 403])
def test_credentials_and_rbac_refusals_are_retried_not_fatal(status: int) -> None:
    """A job must not fail because the bridge's RBAC lacks a verb: an admin fixes it."""
    err = classify(api_error(status, "Forbidden", status_body(
        'secrets is forbidden: User "system:serviceaccount:x:hpc-bridge" cannot create', status)),
        "create Secret team-a/train-mpi-ssh-auth")
    assert isinstance(err, BackendUnavailable)
    assert "cannot create" in str(err) and "RBAC" in str(err)


@pytest.mark.parametrize("status", [400, 404, 409, 422])
def test_client_errors_are_rejections_with_the_apiserver_message(status: int) -> None:
    message = 'JobSet.jobset.x-k8s.io "train" is invalid: spec.replicatedJobs[0].name: ...'
    err = classify(api_error(status, "Unprocessable Entity", status_body(message, status)),
                   "create JobSet team-a/train")
    assert isinstance(err, KubeRejected) and isinstance(err, BackendRejected)
    assert err.status == status
    assert message in str(err) and f"({status})" in str(err)
    assert "create JobSet team-a/train" in str(err)
    assert is_status(err, status) and not is_status(err, 418)
    assert not is_status(BackendRejected("x"), status)


@pytest.mark.parametrize(("body", "expected"), [
    (status_body("the message", 409), "the message"),
    (status_body("the message", 409).encode(), "the message"),
    ("not json", "Conflict"),
    (json.dumps(["a list"]), "Conflict"),
    (json.dumps({"kind": "Status", "message": ""}), "Conflict"),
    (None, "Conflict"),
])
def test_api_message(body: Any, expected: str) -> None:
    assert api_message(api_error(409, "Conflict", body)) == expected
    err = classify(api_error(409, "Conflict", body), "create ConfigMap")
    assert isinstance(err, KubeRejected) and str(err).endswith(expected)
