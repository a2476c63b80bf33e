"""Kubernetes on Slurm-backed nodes (the ``k8s-on-slurm`` back end, pool_adapter/,
docs/kubernetes.md "Kubernetes on Slurm-backed nodes"), on the real slurmctld and the
real kube-apiserver, JobSet controller and scheduler.

The Kubernetes bed's pool nodes node1..4 are the Slurm bed's nodes under the same
names, tainted. A TrainJob routed to the pool gets one Slurm holder job of its whole
shape (its owner alice, the bridge's key), and its pods are bound to exactly that
job's nodes once Slurm runs it; the two end together, whichever ends first.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.bed import Daemon, squeue_bridge_jobs
from tests.integration.k8s_bridge import (
    JOBSETS,
    KWOK_STAY_RUNNING,
    apply,
    conditions,
    is_true,
    k8s_daemon,
    pods,
    trainjob,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release

pytestmark = pytest.mark.integration

POOL = "pool"


def pool_settings(k8s: K8sBed, slurm: dict[str, str]) -> str:
    """The ``[backends.pool]`` section: Slurm through slurmrestd, the bed's apiserver."""
    return "\n".join([
        "", f"[backends.{POOL}]", 'kind = "k8s-on-slurm"', 'placement = "none"',
        f"taint_key = {json.dumps(k8s.env['K8S_POOL_TAINT'].partition('=')[0])}",
        f"pool_label = {json.dumps(k8s.env['K8S_POOL_LABEL'])}",
        "node_state_interval = 1",
        f"[backends.{POOL}.slurm]",
        f"rest_socket = {json.dumps(slurm['SLURMRESTD_SOCKET'])}",
        f"rest_version = {json.dumps(slurm.get('SLURM_REST_VERSION', 'v0.0.38'))}",
        f"jwt_key = {json.dumps(slurm['SLURM_JWT_KEY'])}",
        f"[backends.{POOL}.kubernetes]",
        f"kubeconfig = {json.dumps(k8s.kubeconfig)}", ""])


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]) -> Iterator[Daemon]:
    daemon = k8s_daemon(k8s, k8s_namespace, slurm=testbed, allowed_backends=["slurm", POOL],
                        extra=pool_settings(k8s, testbed))
    daemon.start()
    yield daemon
    release(k8s, k8s_namespace, daemon)


def pool_job(name: str, nodes: int = 2, stay_running: bool = False) -> dict[str, Any]:
    doc = trainjob(name, nodes=nodes, backend=POOL,
                   pod_labels={KWOK_STAY_RUNNING: "true"} if stay_running else None)
    return doc


def trainjob_uid(k8s: K8sBed, ns: str, name: str) -> str:
    uid: str = k8s.get_json("-n", ns, "trainjobs.trainer.kubeflow.org", name)["metadata"]["uid"]
    return uid


def holders(uid: str) -> list[dict[str, Any]]:
    """The Slurm jobs carrying TrainJob ``uid``'s key."""
    return [j for j in squeue_bridge_jobs()
            if str(j.get("comment") or "").split(" ")[0] == f"hpc-bridge:{uid}"]


def state_of(job: dict[str, Any]) -> str:
    state = job.get("job_state")
    return str(state[0] if isinstance(state, list) else state)


def expand(nodes: str) -> set[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    return set(out.split())


def bound_nodes(k8s: K8sBed, ns: str, jobset: str) -> list[str]:
    return [p["spec"].get("nodeName") or "" for p in
            pods(k8s, ns, f"jobset.sigs.k8s.io/jobset-name={jobset},"
                          "jobset.sigs.k8s.io/replicatedjob-name=node")]


def test_a_trainjob_gets_one_slurm_allocation_and_its_pods_bind_to_exactly_its_nodes(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, pool_job("pooled"))
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "pooled"), "Complete"), 90,
                 "the pooled TrainJob to complete")
    uid = trainjob_uid(k8s, ns, "pooled")
    held = holders(uid)
    assert len(held) == 1, held
    holder = held[0]
    assert holder["user_name"] == "alice" and holder["name"] == "pooled", holder
    assert holder["node_count"]["number"] == 2 if isinstance(holder.get("node_count"), dict) \
        else holder["node_count"] == 2
    nodes = expand(holder["nodes"])
    assert len(nodes) == 2 and nodes <= {"node1", "node2", "node3", "node4"}, nodes
    # Every pod on the allocation. (kwok ends a pod at once, and a Succeeded pod no
    # longer repels the next one, so both may have run on one of the nodes in turn;
    # with pods running together, one per node is checked by the scancel test.)
    bound = bound_nodes(k8s, ns, "pooled")
    assert len(bound) == 2 and set(bound) <= nodes, (bound, nodes)
    # Pinned to the allocation's label, valued with the namespace: what the bed's pool
    # admission policy let in (test_k8s_pool_policy.py).
    selectors = [p["spec"]["nodeSelector"] for p in
                 pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=pooled")]
    assert selectors and all(
        s.get(f"slurm.hpc-bridge.io/job-{holder['job_id']}") == ns for s in selectors), selectors
    # The JobSet ended the holder as it ended: COMPLETED, exit 0.
    k8s.wait_for(lambda: state_of(holders(uid)[0]) == "COMPLETED", 60,
                 "the holder job to end COMPLETED")
    # Its nodes lose the allocation's label.
    label = f"slurm.hpc-bridge.io/job-{holder['job_id']}"
    k8s.wait_for(lambda: not k8s.get_json("nodes", "-l", label).get("items"), 30,
                 "the allocation's node labels to go")
    record = bridge.job("pooled")
    assert record["state"] == "Succeeded", record


def test_scancel_of_the_holder_deletes_the_jobset_and_fails_the_trainjob(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, pool_job("evicted", stay_running=True))
    k8s.wait_for(lambda: len([n for n in bound_nodes(k8s, ns, "evicted") if n]) == 2, 90,
                 "the pods to be bound")
    uid = trainjob_uid(k8s, ns, "evicted")
    (holder,) = holders(uid)
    assert state_of(holder) == "RUNNING", holder
    assert sorted(bound_nodes(k8s, ns, "evicted")) == sorted(expand(holder["nodes"]))
    # A pod of the team's own, pinned to the job's allocation (the pool's admission
    # policy lets it in): it must end with the allocation, as the job's pods do; a
    # NoSchedule taint would never evict it.
    label = f"slurm.hpc-bridge.io/job-{holder['job_id']}"
    apply(k8s, ns, {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "sidecar", "labels": {KWOK_STAY_RUNNING: "true"}},
                    "spec": {"nodeSelector": {label: ns},
                             "tolerations": [{"key": k8s.env["K8S_POOL_TAINT"].partition(
                                 "=")[0], "operator": "Exists", "effect": "NoSchedule"}],
                             "containers": [{"name": "c", "image": "busybox"}]}})
    k8s.wait_for(lambda: k8s.get_json("-n", ns, "pod", "sidecar")["status"].get("phase")
                 == "Running", 60, "the team's pinned pod to run")
    subprocess.run(["scancel", str(holder["job_id"])], check=True, timeout=30)
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "evicted"), "Failed"), 60,
                 "the TrainJob to fail")
    failed = conditions(k8s, ns, "evicted")["Failed"]
    assert failed["reason"] == "AllocationEnded", failed
    assert f"Slurm job {holder['job_id']} ended CANCELLED" in failed["message"], failed
    k8s.wait_for(lambda: not k8s.get_json("-n", ns, JOBSETS).get("items"), 60,
                 "the JobSet to be deleted")
    k8s.wait_for(lambda: not k8s.get_json("-n", ns, "pods", "--field-selector",
                                          "metadata.name=sidecar").get("items"), 60,
                 "the team's pod on the ended allocation to be deleted")


def test_an_allocation_label_left_behind_goes_and_so_do_the_pods_pinned_to_it(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """A label of a Slurm job that is not alive (left while the daemon was down) would
    let the namespace's pods past the pool's admission policy: it goes (squeue
    confirms the job is unknown), and so does a pod that was pinned to it. The same
    label on a node outside the pool (another Slurm cluster's, say) stays."""
    ns = k8s_namespace
    node = k8s.env["K8S_POOL_NODES"].split(",")[0]
    outside = k8s.env["K8S_NODES"].split(",")[0]
    label = "slurm.hpc-bridge.io/job-987654321"
    for n in (node, outside):
        k8s.kubectl("label", "node", n, f"{label}={ns}", "--overwrite")
    try:
        apply(k8s, ns, {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "leftover", "labels": {KWOK_STAY_RUNNING: "true"}},
                        "spec": {"nodeSelector": {label: ns, "kubernetes.io/hostname": node},
                                 "tolerations": [{"key": k8s.env["K8S_POOL_TAINT"].partition(
                                     "=")[0], "operator": "Exists", "effect": "NoSchedule"}],
                                 "containers": [{"name": "c", "image": "busybox"}]}})
        k8s.wait_for(lambda: label not in k8s.get_json("node", node)["metadata"]["labels"],
                     60, "the stale allocation label to be removed")
        k8s.wait_for(lambda: not k8s.get_json("-n", ns, "pods", "--field-selector",
                                              "metadata.name=leftover").get("items"), 60,
                     "the pod pinned to the stale label to be deleted")
        assert k8s.get_json("node", outside)["metadata"]["labels"].get(label) == ns
    finally:
        for n in (node, outside):
            k8s.kubectl("label", "node", n, f"{label}-", check=False)


def test_a_trainjob_waits_pending_with_slurms_reason_while_the_nodes_are_taken(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    blocker = subprocess.run(
        ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-N4", "--exclusive",
         "-o", "/dev/null", "--chdir=/tmp", "--wrap", "sleep 600"],
        capture_output=True, text=True, check=True, timeout=30).stdout.strip().split(";")[0]
    try:
        k8s.wait_for(lambda: subprocess.run(
            ["squeue", "-h", "-j", blocker, "-o", "%T"], capture_output=True, text=True,
            timeout=30).stdout.strip() == "RUNNING", 60, "the blocking job to run")
        apply(k8s, ns, pool_job("waiting"))

        def reason() -> str | None:
            resp = bridge.api("GET", "/v1/jobs/waiting")
            if resp.status_code == 404:  # not admitted yet
                return None
            rec = resp.json()
            if rec.get("state") == "Submitted" and rec.get("reason") in (
                    "Resources", "Priority"):
                return str(rec["reason"])
            return None

        k8s.wait_for(reason, 60, "the job to wait with Slurm's reason")
        js = k8s.get_json("-n", ns, JOBSETS, "waiting")
        assert js["spec"]["suspend"] is True
        assert not pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=waiting")
    finally:
        subprocess.run(["scancel", blocker], check=False, timeout=30)
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "waiting"), "Complete"), 90,
                 "the job to run once the nodes are free")


def test_a_pod_without_the_pools_toleration_never_lands_on_the_pool(
        k8s: K8sBed, k8s_namespace: str) -> None:
    ns = k8s_namespace
    label = k8s.env["K8S_POOL_LABEL"]
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "outsider"},
             "spec": {"nodeSelector": {label: "true"},
                      "containers": [{"name": "c", "image": "busybox"}]}}
    free = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "anywhere"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    apply(k8s, ns, plain, free)

    def unschedulable() -> bool:
        pod = k8s.get_json("-n", ns, "pods", "outsider")
        return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                   and "taint" in (c.get("message") or "")
                   for c in (pod.get("status") or {}).get("conditions") or [])

    k8s.wait_for(unschedulable, 60, "the scheduler to refuse the pool to the outsider")
    k8s.wait_for(lambda: k8s.get_json("-n", ns, "pods", "anywhere")["spec"].get("nodeName"),
                 60, "the free pod to be bound")
    node = k8s.get_json("-n", ns, "pods", "anywhere")["spec"]["nodeName"]
    assert node not in k8s.env["K8S_POOL_NODES"].split(","), node


def test_the_time_limit_ends_the_allocation_and_the_trainjob(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """A one-minute limit (the least Slurm takes): Slurm ends the holder TIMEOUT, the
    JobSet goes, the TrainJob fails with the allocation's end."""
    ns = k8s_namespace
    doc = pool_job("limited", nodes=1, stay_running=True)
    doc["metadata"]["annotations"]["hpc-bridge.io/scheduling"] = json.dumps(
        {"time_limit_minutes": 1})
    apply(k8s, ns, doc)
    k8s.wait_for(lambda: any(bound_nodes(k8s, ns, "limited")), 90, "the pod to be bound")
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "limited"), "Failed"), 180,
                 "the TrainJob to fail at the time limit")
    failed = conditions(k8s, ns, "limited")["Failed"]
    assert failed["reason"] == "DeadlineExceeded", failed
    (holder,) = holders(trainjob_uid(k8s, ns, "limited"))
    assert state_of(holder) == "TIMEOUT", holder
    k8s.wait_for(lambda: not k8s.get_json("-n", ns, JOBSETS).get("items"), 60,
                 "the JobSet to be deleted")


def test_sigkills_at_every_step_leave_one_holder_and_one_jobset_per_trainjob(
        k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]) -> None:
    """Twelve 1-node TrainJobs; the daemon is SIGKILLed once the first JobSet exists,
    again once the first holder does, again once the first job completed. Each
    TrainJob completes with exactly one JobSet and one holder job, and every holder
    carrying these jobs' keys is one of theirs."""
    ns = k8s_namespace
    daemon = k8s_daemon(k8s, ns, slurm=testbed, allowed_backends=["slurm", POOL],
                        extra=pool_settings(k8s, testbed))
    names = [f"crash-{i:02d}" for i in range(12)]
    daemon.start()
    try:
        apply(k8s, ns, *[pool_job(n, nodes=1) for n in names])
        uids = {n: trainjob_uid(k8s, ns, n) for n in names}

        def keyed() -> list[dict[str, Any]]:
            return [j for j in squeue_bridge_jobs()
                    if str(j.get("comment") or "").split(" ")[0].removeprefix("hpc-bridge:")
                    in uids.values()]

        steps = [(lambda: k8s.get_json("-n", ns, JOBSETS).get("items"), "a JobSet"),
                 (keyed, "a holder job"),
                 (lambda: any(is_true(conditions(k8s, ns, n), "Complete") for n in names),
                  "a completed TrainJob")]
        for ready, what in steps:
            k8s.wait_for(ready, 90, what)
            daemon.kill()
            daemon.start()
        k8s.wait_for(lambda: all(is_true(conditions(k8s, ns, n), "Complete") for n in names),
                     240, "all TrainJobs to complete")
        per_uid: dict[str, list[str]] = {}
        for job in keyed():
            uid = str(job["comment"]).split(" ")[0].removeprefix("hpc-bridge:")
            per_uid.setdefault(uid, []).append(state_of(job))
        assert per_uid == {u: ["COMPLETED"] for u in uids.values()}, per_uid
        sets = k8s.get_json("-n", ns, JOBSETS).get("items") or []
        assert sorted(js["metadata"]["name"] for js in sets) == names
    finally:
        release(k8s, ns, daemon)


def test_suspend_and_resume_map_to_both_worlds(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """Suspending the TrainJob holds its Slurm job (requeued: its nodes are free) and
    suspends the JobSet (its pods go); resuming releases it, and the pods are bound
    again to the nodes Slurm gives it then."""
    ns = k8s_namespace
    apply(k8s, ns, pool_job("pausing", stay_running=True))
    k8s.wait_for(lambda: len([n for n in bound_nodes(k8s, ns, "pausing") if n]) == 2, 90,
                 "the pods to be bound")
    uid = trainjob_uid(k8s, ns, "pausing")
    k8s.kubectl("-n", ns, "patch", "trainjobs.trainer.kubeflow.org", "pausing",
                "--type=merge", "-p", '{"spec":{"suspend":true}}')
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "pausing"), "Suspended"), 60,
                 "the TrainJob to be suspended")
    k8s.wait_for(lambda: not pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=pausing"), 60,
                 "the pods to go")
    (holder,) = holders(uid)
    assert state_of(holder) == "PENDING", holder
    assert k8s.get_json("-n", ns, JOBSETS, "pausing")["spec"]["suspend"] is True
    k8s.kubectl("-n", ns, "patch", "trainjobs.trainer.kubeflow.org", "pausing",
                "--type=merge", "-p", '{"spec":{"suspend":false}}')
    # Slurm makes a requeued job wait for its BeginTime (about two minutes) first.
    k8s.wait_for(lambda: state_of(holders(uid)[0]) == "RUNNING", 240,
                 "the holder to run again")
    k8s.wait_for(lambda: sorted(n for n in bound_nodes(k8s, ns, "pausing") if n)
                 == sorted(expand(holders(uid)[0]["nodes"])), 90,
                 "the pods to be bound to the new allocation")
    assert len(holders(uid)) == 1


def test_a_drained_slurm_node_is_tainted_on_kubernetes_until_it_is_resumed(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    def taints() -> list[dict[str, Any]]:
        node: dict[str, Any] = k8s.get_json("nodes", "node4")
        return [t for t in node["spec"].get("taints") or []
                if t["key"] == "hpc-bridge.io/slurm-unavailable"]

    assert not taints()
    subprocess.run(["scontrol", "update", "nodename=node4", "state=drain",
                    "reason=hpc-bridge test"], check=True, timeout=30)
    try:
        k8s.wait_for(lambda: [(t["value"], t["effect"]) for t in taints()]
                     == [("DRAIN", "NoSchedule")], 60, "node4's taint")
        pool_taint = k8s.env["K8S_POOL_TAINT"].partition("=")[0]
        assert any(t["key"] == pool_taint for t in k8s.get_json("nodes", "node4")["spec"][
            "taints"]), "the pool's own taint stays"
    finally:
        subprocess.run(["scontrol", "update", "nodename=node4", "state=resume"], check=True,
                       timeout=30)
    k8s.wait_for(lambda: not taints(), 60, "node4's taint to go")


def test_a_holder_without_its_jobset_is_cancelled_as_an_orphan(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """A Slurm job whose comment makes it a holder of this back end, for a JobSet that
    does not exist (as a crash between a TrainJob's deletion and its holder's cancel
    leaves one), is cancelled."""
    ghost = subprocess.run(
        ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-o", "/dev/null",
         "--chdir=/tmp", f"--comment=hpc-bridge:0b5e7a1c-0000-4000-8000-00000000dead "
         f"k8s-on-slurm:{POOL} {k8s_namespace}/ghost", "--wrap", "sleep 600"],
        capture_output=True, text=True, check=True, timeout=30).stdout.strip().split(";")[0]

    def state() -> str:
        return subprocess.run(["squeue", "-h", "--states=all", "-j", ghost, "-o", "%T"],
                              capture_output=True, text=True, timeout=30).stdout.strip()

    try:
        k8s.wait_for(lambda: state() == "CANCELLED", 60, "the orphan holder to be cancelled")
    finally:
        subprocess.run(["scancel", ghost], check=False, timeout=30)
