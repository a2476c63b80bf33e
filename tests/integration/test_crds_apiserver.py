"""The generated CRDs on the test bed's real kube-apiserver (``testbed/k8s/k8s.sh up``).

The bed may carry upstream Kubeflow Trainer's CRDs (``trainjobs.trainer.kubeflow.org``
...), so ours are installed under a group of their own for this module
(``t<hex>.crd-test.hpc-bridge.io``) and deleted afterwards. Objects are created with
``--validate=strict``: the apiserver then also refuses any field it would prune, so
"created" means "kept whole". Under ``CI=true`` a missing bed fails; elsewhere it skips.
"""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.crds import crd_documents
from bridge.model import API_VERSION, MANAGED_BY, load_document
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "default"


@dataclass(frozen=True)
class Cluster:
    kubectl_path: str
    kubeconfig: str
    group: str

    def kubectl(self, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.kubectl_path, "--kubeconfig", self.kubeconfig, *args],
                              input=input, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def resource(self, plural: str) -> str:
        return f"{plural}.{self.group}"

    def create(self, doc: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("create", "--validate=strict", "-o", "json", "-f", "-",
                            input=json.dumps(doc), check=check)

    def get(self, plural: str, name: str, namespace: str | None = NAMESPACE) -> dict[str, Any]:
        ns = ["-n", namespace] if namespace else []
        out = self.kubectl("get", self.resource(plural), name, *ns, "-o", "json").stdout
        result: dict[str, Any] = json.loads(out)
        return result

    def document(self, path: str, name: str | None = None) -> dict[str, Any]:
        """A repository YAML document moved to this module's group (and renamed)."""
        doc: dict[str, Any] = yaml.safe_load((REPO / path).read_text())
        assert doc["apiVersion"] == API_VERSION
        doc["apiVersion"] = f"{self.group}/v1alpha1"
        if name:
            doc["metadata"]["name"] = name
        if doc["kind"] != "ClusterTrainingRuntime":
            doc["metadata"]["namespace"] = NAMESPACE
        return doc


def established(cluster: Cluster, crd: str) -> bool:
    proc = cluster.kubectl("get", "crd", crd, "-o", "json", check=False)
    if proc.returncode != 0:
        return False
    conditions = json.loads(proc.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def cluster(k8s: K8sBed) -> Iterator[Cluster]:
    # The k8s fixture checks the bed (fails under CI=true when it is missing).
    c = Cluster(k8s.kubectl_path, k8s.kubeconfig,
                f"t{secrets.token_hex(4)}.crd-test.hpc-bridge.io")
    docs = crd_documents(c.group)
    names = [d["metadata"]["name"] for d in docs]
    c.kubectl("create", "-f", "-", input="".join("---\n" + json.dumps(d) + "\n" for d in docs))
    try:
        deadline = time.monotonic() + 60
        while not all(established(c, n) for n in names):
            assert time.monotonic() < deadline, f"CRDs {names} not Established within 60 s"
            time.sleep(0.2)
        # Discovery may lag Established by a moment: wait until kubectl knows the kinds.
        while c.kubectl("get", c.resource("trainjobs"), "-n", NAMESPACE,
                        check=False).returncode != 0:
            assert time.monotonic() < deadline, "the new kinds never became usable"
            time.sleep(0.2)
        yield c
    finally:
        c.kubectl("delete", "crd", *names, "--ignore-not-found", "--wait=true")


def test_trainjob_is_created_and_kept_whole(cluster: Cluster) -> None:
    doc = cluster.document("examples/trainjob-plain.yaml")
    stored = json.loads(cluster.create(doc).stdout)
    assert stored["spec"]["trainer"] == doc["spec"]["trainer"]
    # The schema's defaults are the model's.
    assert stored["spec"]["runtimeRef"] == {"name": "plain", "apiGroup": "trainer.kubeflow.org",
                                            "kind": "ClusterTrainingRuntime"}
    back = dict(stored, apiVersion=API_VERSION)
    assert load_document(back).to_dict()["spec"] == load_document(
        dict(doc, apiVersion=API_VERSION)).to_dict()["spec"]


def test_upstream_document_with_the_bridge_as_manager(cluster: Cluster) -> None:
    doc = cluster.document("tests/unit/fixtures/trainjobs/upstream-torch.yaml", "upstream-torch")
    assert doc["spec"]["managedBy"] == MANAGED_BY
    doc["spec"]["futureField"] = {"kept": [1, "two"]}  # spec keeps unknown fields
    doc["spec"]["trainer"]["futureTrainerField"] = True
    stored = json.loads(cluster.create(doc).stdout)
    expected = copy.deepcopy(doc["spec"])
    expected["runtimeRef"].update(apiGroup="trainer.kubeflow.org", kind="ClusterTrainingRuntime")
    assert stored["spec"] == expected
    # managedBy cannot change once set (as upstream).
    proc = cluster.kubectl("patch", cluster.resource("trainjobs"), "upstream-torch", "-n",
                           NAMESPACE, "--type=merge", "-p",
                           json.dumps({"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}),
                           check=False)
    assert proc.returncode != 0 and "immutable" in proc.stderr


@pytest.mark.parametrize(
    ("patch", "words"),
    [({"numNodes": 0}, ["spec.trainer.numNodes", "greater than or equal to 1"]),
     ({"numProcPerNode": "many"}, ["spec.trainer.numProcPerNode"]),
     ({"resourcesPerNode": {"limits": {"cpu": "lots"}}},
      ["spec.trainer.resourcesPerNode.limits.cpu"]),
     ({"env": [{"name": "1BAD", "value": "x"}]}, ["spec.trainer.env[0].name"])],
    ids=["numNodes-0", "numProcPerNode", "quantity", "env-name"])
def test_malformed_trainjob_is_refused(cluster: Cluster, patch: dict[str, Any],
                                       words: list[str]) -> None:
    doc = cluster.document("examples/trainjob-plain.yaml", "malformed")
    doc["spec"]["trainer"].update(patch)
    proc = cluster.create(doc, check=False)
    assert proc.returncode != 0, f"created: {proc.stdout}"
    for word in words:
        assert word in proc.stderr


def test_name_and_manager_rules(cluster: Cluster) -> None:
    doc = cluster.document("examples/trainjob-plain.yaml", "a.b")  # a subdomain, not a label
    proc = cluster.create(doc, check=False)
    assert proc.returncode != 0 and "DNS-1123 label" in proc.stderr
    doc = cluster.document("examples/trainjob-plain.yaml", "other-manager")
    doc["spec"]["managedBy"] = "example.org/controller"
    proc = cluster.create(doc, check=False)
    assert proc.returncode != 0 and "spec.managedBy" in proc.stderr


def test_status_subresource_keeps_conditions(cluster: Cluster) -> None:
    doc = cluster.document("examples/trainjob-plain.yaml", "with-status")
    cluster.create(doc)
    status = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "Submitted",
             "message": "Slurm job 7", "lastTransitionTime": "2026-01-02T03:04:05Z"},
            {"type": "Running", "status": "True", "reason": "Started",
             "lastTransitionTime": "2026-01-02T03:04:06Z", "observedGeneration": 1,
             "futureConditionField": "kept"},
        ],
        "trainerStatus": {"backend": "slurm", "backendJobId": "7", "nodes": ["node1"],
                          "progressPercentage": 10},  # upstream's field: kept too
        "jobsStatus": [{"name": "node", "active": 1}],
    }
    cluster.kubectl("patch", cluster.resource("trainjobs"), "with-status", "-n", NAMESPACE,
                    "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))
    assert cluster.get("trainjobs", "with-status")["status"] == status
    # The main resource ignores status; the status subresource refuses bad conditions.
    proc = cluster.kubectl("patch", cluster.resource("trainjobs"), "with-status", "-n",
                           NAMESPACE, "--subresource=status", "--type=merge", "-p",
                           json.dumps({"status": {"conditions": [{"type": "X",
                                                                  "status": "Maybe"}]}}),
                           check=False)
    assert proc.returncode != 0 and "status.conditions[0].status" in proc.stderr
    # The printer columns: the last condition's type, the runtime, the nodes, Trainer's
    # progress (what the job reported: issue 15), the age.
    table = cluster.kubectl("get", cluster.resource("trainjobs"), "with-status", "-n",
                            NAMESPACE).stdout.split("\n")
    assert table[0].split() == ["NAME", "STATE", "RUNTIME", "NODES", "PROGRESS", "%", "AGE"]
    assert table[1].split()[:5] == ["with-status", "Running", "plain", "1", "10"]


def test_runtimes_are_kept_whole(cluster: Cluster) -> None:
    doc = cluster.document("examples/runtimes/mpich-distributed.yaml")
    stored = json.loads(cluster.create(doc).stdout)
    assert "namespace" not in stored["metadata"]  # cluster-scoped
    assert stored["spec"] == doc["spec"]
    namespaced = dict(copy.deepcopy(doc), kind="TrainingRuntime")
    namespaced["metadata"]["namespace"] = NAMESPACE
    namespaced["spec"]["template"] = {"spec": {"replicatedJobs": [{"name": "node",
                                                                   "replicas": 1}]}}
    stored = json.loads(cluster.create(namespaced).stdout)
    assert stored["metadata"]["namespace"] == NAMESPACE
    assert stored["spec"] == namespaced["spec"]
    assert cluster.get("clustertrainingruntimes", doc["metadata"]["name"], None)["spec"] == (
        doc["spec"])
