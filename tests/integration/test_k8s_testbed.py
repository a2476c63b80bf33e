"""The Kubernetes test bed itself (testbed/k8s/k8s.sh up), against its real control plane:
the Kubeflow Trainer CRDs and their patched managedBy rule, the kwok nodes' topology
labels, and a JobSet whose pods get scheduled and run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.k8sbed import MANAGED_BY, K8sBed, KubectlError

pytestmark = pytest.mark.integration

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_CRDS = ["trainjobs", "trainingruntimes", "clustertrainingruntimes"]
# Fully qualified: a short name like "trainjob" is ambiguous as soon as any other
# group (a test's own CRD) also has a "trainjobs" resource.
TRAINJOBS = f"trainjobs.{TRAINER_GROUP}"
JOBSETS = "jobsets.jobset.x-k8s.io"
RULES_PATH = ("spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec",
              "properties", "managedBy", "x-kubernetes-validations")
# kwok-node-1..4: one block, two racks (the Slurm bed's leaf1/leaf2 under one spine).
EXPECTED_TOPOLOGY = {
    "kwok-node-1": ("block-a", "rack-1"),
    "kwok-node-2": ("block-a", "rack-1"),
    "kwok-node-3": ("block-a", "rack-2"),
    "kwok-node-4": ("block-a", "rack-2"),
}


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def trainjob(name: str, managed_by: str) -> str:
    return json.dumps({
        "apiVersion": f"{TRAINER_GROUP}/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"managedBy": managed_by, "runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2, "command": ["hostname"]}},
    })


@pytest.mark.parametrize("plural", TRAINER_CRDS)
def test_trainer_crd_established_at_v1alpha1(k8s: K8sBed, plural: str) -> None:
    crd = k8s.get_json("crd", f"{plural}.{TRAINER_GROUP}")
    assert condition(crd, "Established") == "True"
    assert condition(crd, "NamesAccepted") == "True"
    versions = crd["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v1alpha1", True, True)]
    assert crd["status"]["storedVersions"] == ["v1alpha1"]
    # testbed/k8s/k8s.sh stamps the pinned Trainer version it applied.
    assert crd["metadata"]["annotations"]["testbed.hpc-bridge.io/trainer-version"] == \
        k8s.env["TRAINER_VERSION"]
    if plural == "trainjobs":  # upstream gives only TrainJob a status subresource
        assert versions[0].get("subresources") == {"status": {}}


def test_managedby_rule_is_patched_and_immutability_kept(k8s: K8sBed) -> None:
    crd: Any = k8s.get_json("crd", TRAINJOBS)
    for key in RULES_PATH:
        crd = crd[key]
    assert len(crd) == 2
    assert f"'{MANAGED_BY}'" in crd[0]["rule"]
    assert "'trainer.kubeflow.org/trainjob-controller'" in crd[0]["rule"]
    assert "'kueue.x-k8s.io/multikueue'" in crd[0]["rule"]
    assert crd[1] == {"message": "field is immutable", "rule": "self == oldSelf"}


@pytest.mark.parametrize(("managed_by", "admitted"), [
    (MANAGED_BY, True),
    ("trainer.kubeflow.org/trainjob-controller", True),
    ("kueue.x-k8s.io/multikueue", True),
    ("someone/else", False),
    ("hpc-bridge.io/controller-2", False),
])
def test_trainjob_managedby_admission(k8s: K8sBed, k8s_namespace: str, managed_by: str,
                                      admitted: bool) -> None:
    proc = k8s.kubectl("-n", k8s_namespace, "apply", "--dry-run=server", "-f", "-",
                       input=trainjob("dry", managed_by), check=False)
    if admitted:
        assert proc.returncode == 0, proc.stderr
        assert "created (server dry run)" in proc.stdout
    else:
        assert proc.returncode != 0
        assert "spec.managedBy" in proc.stderr, proc.stderr
        assert MANAGED_BY in proc.stderr  # the patched message names the bridge


def test_trainjob_managedby_immutable_and_status_subresource(k8s: K8sBed,
                                                             k8s_namespace: str) -> None:
    # Managed by MultiKueue: nothing in the bed reconciles it (no Trainer controller, no
    # Kueue, and a bridge daemon watching TrainJobs only takes its own), so it just sits.
    other = "kueue.x-k8s.io/multikueue"
    k8s.kubectl("-n", k8s_namespace, "create", "-f", "-", input=trainjob("tj", other))
    with pytest.raises(KubectlError, match="field is immutable"):
        k8s.kubectl("-n", k8s_namespace, "patch", TRAINJOBS, "tj", "--type=merge",
                    "-p", json.dumps({"spec": {"managedBy": MANAGED_BY}}))
    status = {"status": {"conditions": [{
        "type": "Complete", "status": "True", "reason": "JobsCompleted",
        "message": "set by the test", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    k8s.kubectl("-n", k8s_namespace, "patch", TRAINJOBS, "tj", "--subresource=status",
                "--type=merge", "-p", json.dumps(status))
    got = k8s.get_json("-n", k8s_namespace, TRAINJOBS, "tj")
    assert condition(got, "Complete") == "True"
    assert got["spec"]["managedBy"] == other


def test_kwok_nodes_carry_topology_labels(k8s: K8sBed) -> None:
    block_key, rack_key, host_key = k8s.env["K8S_TOPOLOGY_LABELS"].split(",")
    assert k8s.env["K8S_NODES"].split(",") == sorted(EXPECTED_TOPOLOGY)
    nodes = {n["metadata"]["name"]: n for n in k8s.get_json("nodes")["items"]}
    for name, (block, rack) in EXPECTED_TOPOLOGY.items():
        labels = nodes[name]["metadata"]["labels"]
        assert (labels[block_key], labels[rack_key], labels[host_key]) == (block, rack, name)
        assert condition(nodes[name], "Ready") == "True"
        assert nodes[name]["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_jobset_pods_scheduled_on_kwok_nodes(k8s: K8sBed, k8s_namespace: str) -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 2, "template": {"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "node", "image": "busybox"}]}},
        }}}]},
    }
    k8s.kubectl("-n", k8s_namespace, "create", "-f", "-", input=json.dumps(jobset))

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = k8s.get_json(
            "-n", k8s_namespace, "pods", "-l", "jobset.sigs.k8s.io/jobset-name=js")["items"]
        return items

    k8s.wait_for(lambda: len(pods()) == 2 and all(p["spec"].get("nodeName") for p in pods()),
                 30, "2 JobSet pods bound to nodes")
    assert {p["spec"]["nodeName"] for p in pods()} <= set(EXPECTED_TOPOLOGY)
    k8s.wait_for(lambda: condition(k8s.get_json("-n", k8s_namespace, JOBSETS, "js"),
                                   "Completed") == "True",
                 60, "JobSet js Completed (kwok completes Job-owned pods)")
    assert {p["status"]["phase"] for p in pods()} == {"Succeeded"}
