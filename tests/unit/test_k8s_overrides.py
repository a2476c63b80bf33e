"""Trainer's ``spec.podSpecOverrides`` on the Kubernetes back end: laid into the JobSet
as runtime patches are, checked for privileges as they are, and a field Trainer does not
define refused naming it (k8s_adapter/overrides.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.backend import AdmissionDenied, BackendRejected
from bridge.model import load_trainjob
from bridge.runtimes import RuntimeCatalog
from k8s_adapter.access import access_policy
from k8s_adapter.backend import create as create_k8s
from k8s_adapter.overrides import as_runtime_patches
from tests.unit.builders import ALICE
from tests.unit.test_k8s_validate import request

GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def with_overrides(overrides: Any) -> Any:
    req = request()
    req.job.spec.pod_spec_overrides = overrides
    return req


def node_pod(body: dict[str, Any]) -> dict[str, Any]:
    rj = next(r for r in body["spec"]["replicatedJobs"] if r["name"] == "node")
    pod: dict[str, Any] = rj["template"]["spec"]["template"]["spec"]
    return pod


def test_an_override_reaches_the_pods_it_targets() -> None:
    from k8s_adapter.jobset import JobSetOptions, render_jobset

    overrides = [{"targetJobs": [{"name": "node"}], "tolerations": [GPU],
                  "nodeSelector": {"gpu": "a100"},
                  "volumes": [{"name": "data", "emptyDir": {}}],
                  "containers": [{"name": "node", "env": [{"name": "X", "value": "1"}],
                                  "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}]
    pod = node_pod(render_jobset(with_overrides(overrides), JobSetOptions()))
    assert pod["tolerations"] == [GPU] and pod["nodeSelector"] == {"gpu": "a100"}
    assert {"name": "data", "emptyDir": {}} in pod["volumes"]
    ctr = next(c for c in pod["containers"] if c["name"] == "node")
    assert {"name": "X", "value": "1"} in ctr["env"]
    assert {"name": "data", "mountPath": "/d"} in ctr["volumeMounts"]
    assert ctr["image"] == "img:1"  # the rest of the container is kept


@pytest.mark.parametrize(("overrides", "words"), [
    ([{"targetJobs": [{"name": "node"}], "hostNetwork": True}], "[0].hostNetwork: not a field"),
    ([{"tolerations": [GPU]}], "[0].targetJobs: a non-empty list"),
    ([{"targetJobs": [{"name": "node"}], "containers": [{"name": "node", "image": "x"}]}],
     "containers[0].image: a container override sets only"),
    ([{"targetJobs": [{"name": "nope"}], "nodeSelector": {}}], "names 'nope'"),
    ([{"targetJobs": [{"name": "node"}], "containers": 5}], "[0].containers: must be a list"),
    ([{"targetJobs": [{"name": "node"}], "tolerations": {"key": "x"}}],
     "[0].tolerations: must be a list"),
    ([{"targetJobs": [{"name": "node"}], "containers": [{"name": "node", "env": 5}]}],
     "containers[0].env: must be a list"),
])
def test_a_malformed_override_is_refused_at_admission_naming_it(overrides: Any,
                                                                words: str) -> None:
    backend = create_k8s("kubernetes", {"kubeconfig": "/nonexistent"})
    with pytest.raises(BackendRejected) as err:
        backend.validate(with_overrides(overrides))
    assert "spec.podSpecOverrides" in str(err.value) and words in str(err.value), err.value


def test_an_override_cannot_do_what_a_patch_may_not() -> None:
    policy = access_policy("backends.kubernetes", {"users": {"alice": {"namespace": "ns"}}})
    doc = {"metadata": {"name": "t", "namespace": "ns"},
           "spec": {"runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"image": "i", "numNodes": 1, "command": ["true"]},
                    "podSpecOverrides": [{"targetJobs": [{"name": "node"}],
                                          "serviceAccountName": "admin"}]}}
    job = load_trainjob(doc)
    with pytest.raises(AdmissionDenied, match=r"spec\.podSpecOverrides\[0\].*serviceAccountName"):
        policy.admit(job, RuntimeCatalog().resolve(job), ALICE, "api")
    doc["spec"]["podSpecOverrides"][0] = {"targetJobs": [{"name": "node"}],
                                          "tolerations": [GPU]}
    job = load_trainjob(doc)
    policy.admit(job, RuntimeCatalog().resolve(job), ALICE, "api")  # a GPU taint is fine


def test_no_overrides_no_patches() -> None:
    assert as_runtime_patches(None) == [] and as_runtime_patches([]) == []


def test_a_malformed_override_is_a_400_not_an_error_at_the_policy() -> None:
    policy = access_policy("backends.kubernetes", {"users": {"alice": {"namespace": "ns"}}})
    doc = {"metadata": {"name": "t", "namespace": "ns"},
           "spec": {"runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"image": "i", "numNodes": 1, "command": ["true"]},
                    "podSpecOverrides": [{"targetJobs": [{"name": "node"}],
                                          "initContainers": True}]}}
    job = load_trainjob(doc)
    policy.admit(job, RuntimeCatalog().resolve(job), ALICE, "api")  # validate() refuses it


def test_a_patch_cannot_grow_the_job_or_hand_it_to_another_controller() -> None:
    from k8s_adapter.jobset import JobSetOptions, render_jobset

    req = request(patch={"trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "replicas": 50,
                            "template": {"spec": {"parallelism": 100, "completions": 100}}}]}}}})
    body = render_jobset(req, JobSetOptions())
    rj = body["spec"]["replicatedJobs"][0]
    assert rj["replicas"] == 1
    assert (rj["template"]["spec"]["parallelism"], rj["template"]["spec"]["completions"]) == (
        2, 2)
    assert "managedBy" not in body["spec"] and body["spec"]["suspend"] is False
    # The JobSet's own fields are not a patch's (Trainer's JobSetSpecPatch): refused.
    for key, value in (("managedBy", "example.com/other"), ("suspend", True)):
        req = request(patch={"trainingRuntimeSpec": {"template": {"spec": {key: value}}}})
        with pytest.raises(BackendRejected, match=f"spec.{key}: not a field"):
            render_jobset(req, JobSetOptions())
