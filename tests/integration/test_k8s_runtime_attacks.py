"""Attacks through a runtime's template and a job's runtime fields (issue 17), against
the real apiserver: by the Kubernetes user mallory, who may write TrainJobs and
TrainingRuntimes in a namespace whose jobs the bridge runs as its account, and by the
Unix user alice over the daemon's socket.

A namespaced TrainingRuntime is written by whoever may write in its namespace, not by
the cluster's admin: its template is checked as a job's own patches are
(k8s_adapter/access.py). A claim template only names a scratch volume (JobSet creates
the claim as itself, and binds whatever it names). Through the socket a namespaced
runtime serves no job; a runtime patch reaches replicated jobs only, and an
initializer's Secret may not be one the bridge made for another user's job. Each
refusal names its field, and nothing reaches the cluster. (Each check's cases one by
one: tests/unit/test_k8s_access.py and test_runtime_templates.py.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup
from tests.integration.k8s_bridge import JOBSETS, apply, conditions, is_true, jobsets, trainjob
from tests.integration.k8s_users import (
    mapped_bridge,
    start_bridge,
    submit_as,
    torch_job,
    users_namespace,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release

pytestmark = pytest.mark.integration

RUNTIMES = "trainingruntimes.trainer.kubeflow.org"


@pytest.fixture
def alice(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    """A daemon mapping the Unix user alice to ``k8s_namespace`` (service account
    ``alice``, Pod Security restricted)."""
    daemon = mapped_bridge(k8s, k8s_namespace)
    yield daemon
    daemon.stop()
    cleanup(daemon.workdir)


def team_runtime(name: str, ns: str | None, pod: dict[str, Any],
                 jobset: dict[str, Any] | None = None,
                 steps: tuple[str, ...] = ()) -> dict[str, Any]:
    """A TrainingRuntime in ``ns`` (a ClusterTrainingRuntime for ``None``) whose trainer
    pod template carries ``pod`` (its ``container`` key: the trainer container's
    fields), after replicated jobs for initializer ``steps``, and whose JobSet template
    carries ``jobset``'s fields."""
    pod = dict(pod)
    container = {"name": "node", "image": "busybox:1.36", **pod.pop("container", {})}
    meta: dict[str, Any] = {"name": name,
                            "labels": {"trainer.kubeflow.org/framework": "torch"}}
    if ns is not None:
        meta["namespace"] = ns
    rjobs = [{"name": step, "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
        "spec": {"template": {"spec": {"containers": [
            {"name": step, "image": "busybox:1.36"}]}}}}} for step in steps]
    rjobs.append({"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {**pod, "containers": [container]}}}}})
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime" if ns is not None else "ClusterTrainingRuntime",
            "metadata": meta,
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
                **(jobset or {}), "replicatedJobs": rjobs}}}}


def on_runtime(name: str, runtime: str) -> dict[str, Any]:
    job = trainjob(name, nodes=1)
    job["spec"]["runtimeRef"] = {"name": runtime, "kind": "TrainingRuntime",
                                 "apiGroup": "trainer.kubeflow.org"}
    return job


@pytest.fixture
def mallory(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    """A daemon whose TrainJob door runs ``k8s_namespace``'s jobs as its account alice
    (Pod Security restricted); the Kubernetes user mallory may write TrainJobs and
    TrainingRuntimes there, nothing else."""
    ns = k8s_namespace
    users_namespace(k8s, ns)
    k8s.kubectl("-n", ns, "create", "role", "runtime-writer", "--verb=create,get,list",
                "--resource=trainjobs.trainer.kubeflow.org,"
                "trainingruntimes.trainer.kubeflow.org")
    k8s.kubectl("-n", ns, "create", "rolebinding", "mallory-writes",
                "--role=runtime-writer", "--user=mallory")
    daemon = start_bridge(k8s, ns, **{f"namespace_accounts.{ns}": "alice"})
    yield daemon
    release(k8s, ns, daemon)
    k8s.kubectl("-n", ns, "delete", RUNTIMES, "--all", check=False)


def as_mallory(k8s: K8sBed, ns: str, *docs: dict[str, Any]) -> None:
    k8s.kubectl("-n", ns, "--as=mallory", "create", "-f", "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))


def failed_with(k8s: K8sBed, ns: str, name: str) -> str:
    """The message of TrainJob ``name``'s Failed condition, once it has one."""
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, name), "Failed"), 60,
                 f"TrainJob {name} to be refused")
    return str(conditions(k8s, ns, name)["Failed"]["message"])


def test_a_namespaced_runtimes_template_cannot_place_or_arm_the_namespaces_pods(
        k8s: K8sBed, k8s_namespace: str, mallory: Daemon) -> None:
    """mallory, who may write TrainingRuntimes in the namespace, wrote templates that
    pin its pods to the control plane, tolerate every taint, mount the host, or read
    the Secrets the bridge made for another job."""
    ns = k8s_namespace
    where = "spec.template.spec.replicatedJobs[0].template.spec.template.spec."
    cases = [
        ("pin", {"nodeName": "control-plane"}, "nodeName"),
        ("tolerate", {"tolerations": [{"operator": "Exists"}]}, "tolerations[0]"),
        ("host", {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
         "volumes[0].hostPath"),
        ("token", {"container": {"envFrom": [{"secretRef": {
            "name": "bobs-job-data-cache-token"}}]}}, "containers[0].envFrom[0]"),
        ("ssh", {"volumes": [{"name": "k", "secret": {
            "secretName": "bobs-job-mpi-ssh-auth"}}]}, "volumes[0]"),
    ]
    # A harmless one first: its job runs, so the door reads this namespace's runtimes.
    as_mallory(k8s, ns, team_runtime("team-plain", ns, {}), on_runtime("on-plain",
                                                                      "team-plain"))
    k8s.wait_for(lambda: "on-plain" in {j["metadata"]["name"] for j in jobsets(k8s, ns)},
                 60, "the JobSet of a TrainJob on a harmless namespaced runtime")
    for name, pod, _ in cases:
        as_mallory(k8s, ns, team_runtime(f"team-{name}", ns, pod),
                   on_runtime(f"on-{name}", f"team-{name}"))
    for name, _, field in cases:
        message = failed_with(k8s, ns, f"on-{name}")
        assert f"TrainingRuntime {ns}/team-{name}: {where}{field}" in message, (name, message)
        assert "not allowed" in message, (name, message)
    assert {j["metadata"]["name"] for j in jobsets(k8s, ns)} == {"on-plain"}


def test_a_claim_template_cannot_bind_another_volume(
        k8s: K8sBed, k8s_namespace: str, mallory: Daemon) -> None:
    """JobSet creates a claim template's claims as itself: one naming a volume (or a
    selector, or a data source) would hand the namespace a volume it could not claim."""
    ns = k8s_namespace
    claim = {"metadata": {"name": "scratch"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "volumeName": "someone-elses-pv",
        "resources": {"requests": {"storage": "1Gi"}}}}
    policies = {"volumeClaimPolicies": [{"templates": [claim], "retentionPolicy": {
        "whenDeleted": "Delete"}}]}
    as_mallory(k8s, ns, team_runtime("team-claim", ns, {}, jobset=policies),
               on_runtime("on-claim", "team-claim"))
    assert "volumeName" in failed_with(k8s, ns, "on-claim")
    assert not jobsets(k8s, ns)
    assert not k8s.get_json("-n", ns, "persistentvolumeclaims").get("items")


def test_a_unix_user_cannot_name_a_namespaced_runtime(
        k8s: K8sBed, k8s_namespace: str, alice: Daemon) -> None:
    """Through the socket alice chooses her job's namespace herself: a namespace's
    TrainingRuntime never serves such a job (bridge/runtimes.py), so a runtime someone
    else wrote there does not reach her pods, whatever it holds."""
    ns = k8s_namespace
    k8s.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(team_runtime(
        "team-pin", ns, {"nodeName": "control-plane"})))
    try:
        # The door has read it once a TrainJob object on it is refused by its template.
        apply(k8s, ns, on_runtime("on-pin", "team-pin"))
        assert "nodeName" in failed_with(k8s, ns, "on-pin")
        job = torch_job("mine", None)
        job["spec"]["runtimeRef"] = {"name": "team-pin", "kind": "TrainingRuntime"}
        answer = submit_as(alice, "alice", job)
        assert answer["status"] == 400, answer
        assert "spec.runtimeRef.name: unknown TrainingRuntime 'team-pin'" in answer["error"]
        assert not jobsets(k8s, ns)
    finally:
        k8s.kubectl("-n", ns, "delete", RUNTIMES, "--all", check=False)


def test_alices_own_fields_cannot_reach_the_jobset_or_bobs_secret(
        k8s: K8sBed, k8s_namespace: str, alice: Daemon) -> None:
    """A runtime patch that sets a JobSet field (``managedBy`` would hand the JobSet to
    another controller, ``network`` rename its pods' hosts) is refused, not dropped;
    an initializer naming the data-cache token of bob's job is refused."""
    ns = k8s_namespace
    for key, value in [("managedBy", "example.com/other"),
                       ("network", {"subdomain": "kube-dns"})]:
        job = torch_job(f"patch-{key.lower()}", None)
        job["spec"]["runtimePatches"] = [{"manager": "alice", "trainingRuntimeSpec": {
            "template": {"spec": {key: value}}}}]
        answer = submit_as(alice, "alice", job)
        assert answer["status"] == 400, (key, answer)
        assert f"trainingRuntimeSpec.template.spec.{key}: not a field of a runtime patch" \
            in answer["error"], (key, answer)
    # An admin's runtime with Trainer's dataset step: spec.initializer.dataset
    # configures it, its secretRef loaded into the step as envFrom.
    site = f"steps-{ns}"
    k8s.kubectl("apply", "-f", "-", input=json.dumps(team_runtime(
        site, None, {}, steps=("dataset-initializer",))))
    try:
        job = torch_job("steal", None)
        job["spec"]["runtimeRef"] = {"name": site}
        job["spec"]["initializer"] = {"dataset": {
            "storageUri": "hf://x/y", "secretRef": {"name": "bobs-job-data-cache-token"}}}
        answers: list[dict[str, Any]] = []

        def read() -> bool:  # the watch delivers the runtime a moment after apply
            answers.append(submit_as(alice, "alice", job))
            return "unknown" not in str(answers[-1].get("error"))
        k8s.wait_for(read, 60, f"the daemon to read ClusterTrainingRuntime {site}")
        assert answers[-1]["status"] == 403, answers[-1]
        assert "spec.initializer.dataset.secretRef: not allowed" in answers[-1]["error"]
        assert alice.api("GET", "/v1/jobs").json()["items"] == []
        assert not k8s.get_json("-n", ns, JOBSETS).get("items")
    finally:
        k8s.kubectl("delete", "clustertrainingruntimes.trainer.kubeflow.org", site,
                    "--ignore-not-found", check=False)
