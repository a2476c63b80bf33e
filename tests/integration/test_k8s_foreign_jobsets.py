"""A foreign pod carrying a victim's uid label, against the real apiserver and a real
daemon: bob, who may create pods in his own namespace only, labels one with the uid of
a job he can see in ``tqueue`` (``hpc-bridge.io/uid``, ``managed-by=hpc-bridge``).

Before the Kubernetes back end kept its JobSets and pods by (namespace, uid), bob's
pod became one of the victim's: its node was reported as the victim's, a failure of
it as the victim's failure, its log as the victim's ``tlog``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from k8s_adapter.jobset import MANAGED_BY_LABEL, MANAGED_BY_VALUE, UID_LABEL
from tests.integration.bed import Daemon, cleanup
from tests.integration.k8s_bridge import k8s_daemon
from tests.integration.k8s_users import torch_job
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration

MANAGED = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}


@pytest.fixture
def bobs_namespace(k8s: K8sBed) -> Iterator[str]:
    """A namespace where the service account ``bob`` may edit (create pods), and
    nothing more."""
    ns = k8s.new_namespace("hpcb-bob-")
    k8s.kubectl("-n", ns, "create", "serviceaccount", "bob")
    k8s.kubectl("-n", ns, "create", "rolebinding", "bob-edits", "--clusterrole=edit",
                f"--serviceaccount={ns}:bob")
    yield ns
    k8s.delete_namespace(ns)


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    daemon = k8s_daemon(k8s, k8s_namespace)
    daemon.start()
    yield daemon
    daemon.stop()
    cleanup(daemon.workdir)


def test_bobs_pod_with_the_victims_uid_adds_nothing_to_the_victims_job(
        k8s: K8sBed, k8s_namespace: str, bobs_namespace: str, bridge: Daemon) -> None:
    nodes = sorted(n["metadata"]["name"] for n in k8s.get_json("nodes")["items"]
                   if n["metadata"]["name"].startswith("kwok-"))
    mine, bobs_node = nodes[0], nodes[-1]
    doc = torch_job("victim", k8s_namespace, nodes=1, pod_spec={
        "nodeSelector": {"kubernetes.io/hostname": mine}})
    doc["spec"]["suspend"] = True  # bob reads its uid before it runs
    resp = bridge.api("POST", "/v1/jobs", json=doc)
    assert resp.status_code == 201, resp.text
    victim = resp.json()
    bob = f"system:serviceaccount:{bobs_namespace}:bob"
    planted = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "aaa-planted", "namespace": bobs_namespace,
        "labels": {**MANAGED, UID_LABEL: victim["uid"]},
        "annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
        "spec": {"nodeName": bobs_node,
                 "containers": [{"name": "node", "image": "busybox:1.36"}]}}
    k8s.kubectl("--as", bob, "create", "-f", "-", input=json.dumps(planted))
    k8s.wait_for(lambda: k8s.get_json("-n", bobs_namespace, "pod", "aaa-planted")
                 .get("status", {}).get("phase") == "Running", 30, "bob's pod to run")
    assert bridge.api("POST", f"/v1/jobs/{victim['id']}/resume").status_code == 202
    done = bridge.wait_state(victim["id"], ["Succeeded", "Failed"], timeout=90)
    assert done["state"] == "Succeeded", done
    assert done["nodes"] == [mine], done  # bob's node is not the victim's
