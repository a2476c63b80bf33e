"""The Slurm-backed pool's admission policy (charts/hpc-bridge/templates/
slurm-pool-policy.yaml, which testbed/k8s/k8s.sh renders with the chart's helm and
applies), tried on the real kube-apiserver by a namespace user who may create pods.

The attacker: ``mallory``, a ServiceAccount with the built-in ``edit`` role in her own
namespace (what a team member gets). The pool's taint keeps her plain pods off; the
policy keeps off her pods that tolerate it, tolerate everything, skip the scheduler
with ``spec.nodeName`` onto a pool node, or pin themselves to an allocation of another
namespace. A pod pinned to an allocation of her own namespace is admitted (the pods of
her own TrainJobs on the k8s-on-slurm back end, which the pool's tests in
test_k8s_on_slurm.py run under this same policy).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration

ALLOC = "slurm.hpc-bridge.io/job-4242"


@pytest.fixture
def mallory(k8s: K8sBed, k8s_namespace: str) -> Iterator[str]:
    """``--as`` for a ServiceAccount with ``edit`` in the test namespace."""
    ns = k8s_namespace
    k8s.kubectl("-n", ns, "create", "serviceaccount", "mallory")
    k8s.kubectl("-n", ns, "create", "rolebinding", "mallory-edits", "--clusterrole=edit",
                f"--serviceaccount={ns}:mallory")
    who = f"--as=system:serviceaccount:{ns}:mallory"
    k8s.wait_for(lambda: k8s.kubectl("-n", ns, "auth", "can-i", "create", "pods", who,
                                     check=False).stdout.strip() == "yes",
                 30, "mallory's RoleBinding to take effect")
    yield who


def pod(name: str, **spec: Any) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {**spec, "containers": [{"name": "c", "image": "busybox"}]}})


def create(k8s: K8sBed, ns: str, who: str, manifest: str, verb: str = "create"
           ) -> tuple[int, str]:
    proc = k8s.kubectl("-n", ns, verb, "-f", "-", who, input=manifest, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_policy_is_installed_on_the_bed(k8s: K8sBed) -> None:
    name = k8s.env["K8S_POOL_POLICY"]
    binding = k8s.get_json("validatingadmissionpolicybinding", name)
    assert binding["spec"]["validationActions"] == ["Deny"]
    policy = k8s.get_json("validatingadmissionpolicy", name)
    assert not (policy.get("status") or {}).get("typeChecking", {}).get("expressionWarnings")


@pytest.mark.parametrize("case", ["tolerates the pool", "tolerates every taint",
                                  "names a pool node", "pinned to another namespace",
                                  "names a pool node, pinned"])
def test_a_namespace_user_cannot_put_a_pod_on_the_pool_outside_an_allocation(
        k8s: K8sBed, k8s_namespace: str, mallory: str, case: str) -> None:
    ns = k8s_namespace
    taint = k8s.env["K8S_POOL_TAINT"].partition("=")[0]
    node = k8s.env["K8S_POOL_NODES"].split(",")[0]
    tolerate = [{"key": taint, "operator": "Exists", "effect": "NoSchedule"}]
    spec: dict[str, Any] = {
        "tolerates the pool": {"tolerations": tolerate},
        "tolerates every taint": {"tolerations": [{"operator": "Exists"}]},
        "names a pool node": {"nodeName": node},
        "pinned to another namespace": {"tolerations": tolerate,
                                        "nodeSelector": {ALLOC: "someone-else"}},
        # the scheduler places an allocation's pods: nodeName would leave the check of
        # the selector to the kubelet (kwok has none)
        "names a pool node, pinned": {"nodeName": node, "tolerations": tolerate,
                                      "nodeSelector": {ALLOC: ns}},
    }[case]
    rc, out = create(k8s, ns, mallory, pod("intruder", **spec))
    assert rc != 0 and "Forbidden" in out and k8s.env["K8S_POOL_POLICY"] in out, out
    assert taint in out  # the message names the pool's taint
    assert k8s.kubectl("-n", ns, "get", "pod", "intruder", check=False).returncode != 0


def test_a_pod_pinned_to_its_own_namespaces_allocation_is_admitted_and_may_not_gain_tolerations(
        k8s: K8sBed, k8s_namespace: str, mallory: str) -> None:
    ns = k8s_namespace
    taint = k8s.env["K8S_POOL_TAINT"].partition("=")[0]
    tolerate = [{"key": taint, "operator": "Exists", "effect": "NoSchedule"}]
    rc, out = create(k8s, ns, mallory,
                     pod("mine", tolerations=tolerate, nodeSelector={ALLOC: ns}))
    assert rc == 0, out
    # A plain pod is admitted; it may not add the pool's toleration afterwards (a pod
    # may gain tolerations on update).
    rc, out = create(k8s, ns, mallory, pod("later"))
    assert rc == 0, out
    rc, out = create(k8s, ns, mallory, pod("later", tolerations=tolerate), verb="apply")
    assert rc != 0 and "Forbidden" in out, out
    later = k8s.get_json("-n", ns, "pod", "later")
    assert not later["spec"].get("tolerations") or all(
        t.get("key") != taint for t in later["spec"]["tolerations"])
    # A change that leaves the tolerations alone is not checked (controllers' label and
    # finalizer updates of the pool's own pods).
    k8s.kubectl("-n", ns, "label", "pod", "mine", "touched=yes", mallory)


def test_a_workload_whose_pods_would_tolerate_the_pool_gets_none(
        k8s: K8sBed, k8s_namespace: str, mallory: str) -> None:
    """A controller creates the pods (not mallory): the policy refuses them all the
    same, and the controller reports why."""
    ns = k8s_namespace
    job = json.dumps({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sneaky"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox"}]}}}})
    rc, out = create(k8s, ns, mallory, job)
    assert rc == 0, out

    def refused() -> bool:
        events = k8s.get_json("-n", ns, "events", "--field-selector",
                              "involvedObject.name=sneaky,reason=FailedCreate")
        return any(k8s.env["K8S_POOL_POLICY"] in (e.get("message") or "")
                   for e in events.get("items") or [])

    k8s.wait_for(refused, 60, "the Job controller to report the policy's refusal")
    assert not k8s.get_json("-n", ns, "pods", "-l", "job-name=sneaky").get("items")
