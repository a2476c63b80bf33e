"""Training runtimes from the cluster (k8s_adapter/runtime_source.py) on the real
control plane: a ClusterTrainingRuntime an admin applies serves the next TrainJob, even
one applied with it, and so does a namespaced TrainingRuntime for its own namespace.
(Which runtimes a job may see, and deletions, are unit tests:
tests/unit/test_cluster_runtimes.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.bed import Daemon
from tests.integration.k8s_bridge import (
    JOBSETS,
    apply,
    conditions,
    is_true,
    jobsets,
    k8s_daemon,
    trainjob,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release

pytestmark = pytest.mark.integration

RUNTIMES = "clustertrainingruntimes.trainer.kubeflow.org"


def runtime(kind: str, name: str, image: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta,
            "spec": {"mlPolicy": {"numNodes": 2, "torch": {}}, "template": {"spec": {
                "replicatedJobs": [{"name": "node", "template": {
                    "metadata": {"labels": {
                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{
                        "name": "node", "image": image,
                        "command": ["sh", "-c", f"echo {name}"]}]}}}}}]}}}}


def trainer_container(k8s: K8sBed, namespace: str, name: str) -> dict[str, Any]:
    jobset = k8s.get_json("-n", namespace, JOBSETS, name)
    for rjob in jobset["spec"]["replicatedJobs"]:
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "node":
                return dict(container)
    raise AssertionError(f"no container node in JobSet {name}")


def names(objects: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objects}


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    daemon = k8s_daemon(k8s, k8s_namespace)
    daemon.start()
    yield daemon
    release(k8s, k8s_namespace, daemon)


def test_runtimes_come_from_the_cluster(k8s: K8sBed, k8s_namespace: str,
                                        bridge: Daemon) -> None:
    ns = k8s_namespace
    site = f"site-{ns}"
    try:
        # Applied together: the TrainJob may reach the bridge before its runtime. Its
        # image and command come from the runtime.
        with_site = trainjob("with-site", runtime=site, image=None)
        del with_site["spec"]["trainer"]["command"]
        apply(k8s, ns, runtime("ClusterTrainingRuntime", site, f"site.example/torch:{ns}"),
              with_site)
        k8s.wait_for(lambda: "with-site" in names(jobsets(k8s, ns)),
                     60, "the JobSet of a TrainJob naming the cluster's runtime")
        container = trainer_container(k8s, ns, "with-site")
        assert container["image"] == f"site.example/torch:{ns}"
        assert container["command"] == ["sh", "-c", f"echo {site}"]

        # A namespaced runtime: its own namespace's TrainJobs only.
        team = trainjob("with-team", runtime="team-torch", image=None)
        team["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
        apply(k8s, ns, runtime("TrainingRuntime", "team-torch", "team.example/torch:1", ns),
              team)
        k8s.wait_for(lambda: "with-team" in names(jobsets(k8s, ns)),
                     60, "the JobSet of a TrainJob naming its namespace's runtime")
        assert trainer_container(k8s, ns, "with-team")["image"] == "team.example/torch:1"

        # Another namespace's TrainingRuntime is not this namespace's.
        apply(k8s, "default", runtime("TrainingRuntime", site, "other.example/torch:1",
                                      "default"))
        borrow = trainjob("borrow", runtime=site, image=None)
        borrow["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
        apply(k8s, ns, borrow)
        k8s.wait_for(lambda: is_true(conditions(k8s, ns, "borrow"), "Failed"), 60,
                     "a TrainJob naming another namespace's runtime to be refused")
        assert f"unknown TrainingRuntime '{site}'" in conditions(
            k8s, ns, "borrow")["Failed"]["message"]
    finally:
        k8s.kubectl("delete", RUNTIMES, site, "--ignore-not-found", check=False)
        k8s.kubectl("-n", "default", "delete", "trainingruntimes.trainer.kubeflow.org", site,
                    "--ignore-not-found", check=False)
