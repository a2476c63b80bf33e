"""TrainJob CRs through the bridge on the real control plane (kube-apiserver, JobSet
controller, kube-scheduler, kwok nodes) and the real Slurm bed.

What a Kubernetes user does: ``kubectl apply`` a TrainJob managed by the bridge, watch
its conditions, ``kubectl delete`` it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup, squeue_bridge_jobs
from tests.integration.k8s_bridge import (
    JOBSETS,
    KWOK_FAIL,
    KWOK_STAY_RUNNING,
    TRAINJOBS,
    all_trainjobs,
    apply,
    conditions,
    event_reasons,
    events,
    is_true,
    jobsets,
    k8s_daemon,
    node_ready,
    pods,
    trainjob,
)
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration


def release(k8s: K8sBed, namespace: str, daemon: Daemon) -> None:
    """Delete the namespace's TrainJobs while the daemon runs (it removes its finalizer),
    then stop it; strip what is left so the namespace can go."""
    k8s.kubectl("-n", namespace, "delete", TRAINJOBS, "--all", "--wait=false", check=False)
    try:
        k8s.wait_for(lambda: not all_trainjobs(k8s, namespace), 60,
                     "the bridge to release the test TrainJobs")
    finally:
        daemon.stop()
        for obj in all_trainjobs(k8s, namespace):
            k8s.kubectl("-n", namespace, "patch", TRAINJOBS, obj["metadata"]["name"],
                        "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        if not os.environ.get("HPCB_KEEP"):
            cleanup(daemon.workdir)


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]) -> Iterator[Daemon]:
    daemon = k8s_daemon(k8s, k8s_namespace, slurm=testbed)
    daemon.start()
    yield daemon
    release(k8s, k8s_namespace, daemon)


def test_trainjob_becomes_a_jobset_whose_pods_succeed_on_kwok_nodes(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, trainjob("mnist", nodes=2))
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "mnist"), "Complete"), 90,
                 "TrainJob mnist to be Complete")

    js = k8s.get_json("-n", ns, JOBSETS, "mnist")
    tj = k8s.get_json("-n", ns, TRAINJOBS, "mnist")
    # Laid out as Kubeflow Trainer does, owned by the TrainJob.
    assert js["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
    assert js["metadata"]["labels"]["hpc-bridge.io/job-uid"] == tj["metadata"]["uid"]
    assert js["spec"]["network"]["subdomain"] == "mnist"
    (rjob,) = js["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    job_spec = rjob["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"]) == (2, 2)
    (container,) = job_spec["template"]["spec"]["containers"]
    assert container["name"] == "node"
    env = {e["name"]: e for e in container["env"]}
    assert env["PET_NNODES"]["value"] == "2"
    assert env["PET_MASTER_ADDR"]["value"] == "mnist-node-0-0.mnist"
    assert "job-completion-index" in env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]

    job_pods = pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=mnist")
    assert len(job_pods) == 2
    assert all(p["status"]["phase"] == "Succeeded" for p in job_pods)
    assert all(p["spec"]["nodeName"].startswith("kwok-node-") for p in job_pods)

    status = tj["status"]
    assert [c["type"] for c in status["conditions"]][-1] == "Complete"
    assert status["jobsStatus"] == [{"name": "node", "active": 0, "ready": 0, "succeeded": 1,
                                     "failed": 0, "suspended": 0}]
    assert status["trainerStatus"]["progressPercentage"] == 100
    # The bridge's own record agrees, with the nodes the pods ran on.
    record = bridge.job(tj["metadata"]["uid"])
    assert record["state"] == "Succeeded"
    assert sorted(record["nodes"]) == sorted({p["spec"]["nodeName"] for p in job_pods})


def test_jobs_status_follows_the_jobset_while_the_job_stays_running(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """The job is Running once a pod is active; its pods becoming ready later change no
    state, and the TrainJob's jobsStatus still follows the JobSet (it stayed at
    ``ready: 0`` while the job ran)."""
    ns = k8s_namespace
    apply(k8s, ns, trainjob("steady", nodes=2, pod_labels={KWOK_STAY_RUNNING: "true"}))
    k8s.wait_for(lambda: [j["metadata"]["name"] for j in jobsets(k8s, ns)] == ["steady"], 60,
                 "the bridge to make the JobSet")

    def jobset_status() -> list[dict[str, Any]]:
        js = k8s.get_json("-n", ns, JOBSETS, "steady").get("status") or {}
        return [{"name": r["name"], **{k: r.get(k, 0) for k in (
            "active", "ready", "succeeded", "failed", "suspended")}}
            for r in js.get("replicatedJobsStatus") or []]
    # kwok's pace (a bed busy ending another test's pods schedules late), not the bridge's.
    try:
        k8s.wait_for(lambda: [r["ready"] for r in jobset_status()] == [1], 240,
                     "the JobSet's job to be ready (its pods running on kwok)")
    except pytest.fail.Exception as exc:
        seen = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
                 [f"{c['type']}={c['status']}" for c in p["status"].get("conditions") or []])
                for p in pods(k8s, ns)]
        jobs = [(j["metadata"]["name"], j.get("status")) for j in k8s.get_json(
            "-n", ns, "jobs").get("items") or []]
        pytest.fail(f"{exc}; JobSet {jobset_status()}; Jobs {jobs}; pods {seen}")

    def agree() -> bool:
        tj = k8s.get_json("-n", ns, TRAINJOBS, "steady").get("status") or {}
        return bool(tj.get("jobsStatus") == jobset_status())
    k8s.wait_for(agree, 30, "the TrainJob's jobsStatus to show its JobSet's ready job")
    assert node_ready(k8s, ns, "steady")
    assert bridge.job(k8s.get_json("-n", ns, TRAINJOBS, "steady")["metadata"]["uid"])[
        "state"] == "Running"


def test_a_failing_pod_fails_the_trainjob_with_the_reason(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    # An admin's runtime with no retries: Trainer's defaults (OnFailure, backoffLimit 6)
    # would retry for minutes.
    apply(k8s, ns, trainjob("crash", runtime="plain-once", nodes=2, command=["false"],
                            pod_labels={KWOK_FAIL: "true"},
                            pod_annotations={f"{KWOK_FAIL}/exit-code": "3",
                                             f"{KWOK_FAIL}/delay": "100ms"}))
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "crash"), "Failed"), 90,
                 "TrainJob crash to be Failed")
    failed = conditions(k8s, ns, "crash")["Failed"]
    assert failed["reason"] == "NonZeroExitCode"
    assert "exit code 3" in failed["message"]
    assert "container node" in failed["message"]
    assert not is_true(conditions(k8s, ns, "crash"), "Complete")


def test_deleting_the_trainjob_removes_its_jobset_and_pods(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    # Pods that cannot be scheduled stay: the job is still "running" when deleted.
    apply(k8s, ns, trainjob("stuck", nodes=2, node_selector={"hpc-bridge.io/no": "such"}))
    k8s.wait_for(lambda: len(pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=stuck")) == 2, 60,
                 "the JobSet's 2 pods to exist")
    assert "hpc-bridge.io/finalizer" in k8s.get_json(
        "-n", ns, TRAINJOBS, "stuck")["metadata"]["finalizers"]
    uid = k8s.get_json("-n", ns, TRAINJOBS, "stuck")["metadata"]["uid"]

    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "stuck", "--timeout=90s")

    # The bridge deletes the JobSet in the foreground and lets the TrainJob go once the
    # JobSet is being deleted; the garbage collector may still be removing its Jobs.
    k8s.wait_for(lambda: not jobsets(k8s, ns), 60, "the JobSet to be gone")
    k8s.wait_for(lambda: not pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=stuck"), 60,
                 "the pods to be gone")
    assert bridge.job(uid)["state"] == "Cancelled"


def test_suspend_and_resume_through_spec_suspend(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, trainjob("hold", nodes=2, node_selector={"hpc-bridge.io/no": "such"}))
    selector = "jobset.sigs.k8s.io/jobset-name=hold"
    k8s.wait_for(lambda: len(pods(k8s, ns, selector)) == 2, 60, "2 pods")

    k8s.kubectl("-n", ns, "patch", TRAINJOBS, "hold", "--type=merge",
                "-p", '{"spec":{"suspend":true}}')
    k8s.wait_for(lambda: k8s.get_json("-n", ns, JOBSETS, "hold")["spec"].get("suspend"), 30,
                 "the JobSet to be suspended")
    k8s.wait_for(lambda: not pods(k8s, ns, selector), 60, "the pods of the suspended JobSet "
                                                          "to go")
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "hold"), "Suspended"), 30,
                 "condition Suspended")
    # Its event is recorded before the condition is written.
    held = events(k8s, ns, "hold")
    assert {e.get("reason") for e in held} & {"Suspended", "BackendSuspended"}, held
    while_held = {e["metadata"]["uid"] for e in held}

    k8s.kubectl("-n", ns, "patch", TRAINJOBS, "hold", "--type=merge",
                "-p", '{"spec":{"suspend":false}}')
    k8s.wait_for(lambda: len(pods(k8s, ns, selector)) == 2, 60, "the pods to come back")
    k8s.wait_for(lambda: not is_true(conditions(k8s, ns, "hold"), "Suspended"), 30,
                 "condition Suspended to clear")
    resumed = conditions(k8s, ns, "hold")["Suspended"]  # as Trainer writes it
    assert (resumed["status"], resumed["reason"]) == ("False", "Resumed")
    # The history in events: held, then let go. Holds and releases are recorded whatever
    # the job's allowance for reason flips. Events carry whole seconds, so those of one
    # second list in any order: "then" is "among the events recorded after the resume".
    def released() -> bool:
        return any(e["metadata"]["uid"] not in while_held
                   and e.get("reason") not in ("Suspended", "BackendSuspended")
                   for e in events(k8s, ns, "hold"))

    k8s.wait_for(released, 30, "an event of the release")


def test_malformed_trainjobs_fail_with_a_readable_message_and_nothing_crashes(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns,
          trainjob("unknown-runtime", runtime="no-such-runtime"),
          trainjob("zero-nodes", nodes=0),
          trainjob("no-image", image=None, runtime="mpich-distributed"),  # nor the runtime
          trainjob("not-allowed", backend="flux"),
          trainjob("hostile", command=["sh", "-c", "echo $(id) `uname`; rm -rf / ;'\"\\"]))

    expected = {
        "unknown-runtime": "unknown ClusterTrainingRuntime 'no-such-runtime'",
        "zero-nodes": "spec.trainer.numNodes: must be >= 1, got 0",
        "no-image": "spec.trainer.image: required by the Kubernetes back end",
        "not-allowed": "back end 'flux' is not allowed",
    }
    for name, text in expected.items():
        k8s.wait_for(lambda n=name: is_true(conditions(k8s, ns, n), "Failed"), 60,
                     f"TrainJob {name} to be Failed")
        message = conditions(k8s, ns, name)["Failed"]["message"]
        assert text in message, (name, message)
    # The hostile command is just an argv: it reaches the pod spec verbatim.
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "hostile"), "Complete"), 90,
                 "the hostile-string TrainJob to complete")
    container = k8s.get_json("-n", ns, JOBSETS, "hostile")["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sh", "-c", "echo $(id) `uname`; rm -rf / ;'\"\\"]
    # Refused TrainJobs keep no finalizer (deleting them never hangs), and the daemon
    # is alive and still admits good jobs.
    assert not k8s.get_json("-n", ns, TRAINJOBS, "zero-nodes")["metadata"].get("finalizers")
    apply(k8s, ns, trainjob("after", nodes=1))
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "after"), "Complete"), 90,
                 "a good TrainJob after the bad ones")
    assert bridge.proc is not None and bridge.proc.poll() is None


def test_a_trainjob_routed_to_slurm_runs_there_and_reports_running_then_complete(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, trainjob("on-slurm", runtime="plain", nodes=2, image=None, backend="slurm",
                            command=["sh", "-c", "sleep 4; hostname"]))
    k8s.wait_for(lambda: node_ready(k8s, ns, "on-slurm"), 60,
                 "TrainJob on-slurm to be running (jobsStatus ready)")
    running = k8s.get_json("-n", ns, TRAINJOBS, "on-slurm")["status"]
    assert running["jobsStatus"][0]["active"] == 1
    assert not running.get("conditions")  # Trainer's convention: none while it runs
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "on-slurm"), "Complete"), 90,
                 "TrainJob on-slurm to be Complete")
    uid = k8s.get_json("-n", ns, TRAINJOBS, "on-slurm")["metadata"]["uid"]
    record = bridge.job(uid)
    assert record["backend"] == "slurm"
    assert record["backendId"].isdigit()
    assert len(record["nodes"]) == 2
    assert not jobsets(k8s, ns)
    # The history is in the events: running on two Slurm nodes, then complete.
    k8s.wait_for(lambda: "Completed" in event_reasons(k8s, ns, "on-slurm"), 30,
                 "the Completed event")
    history = events(k8s, ns, "on-slurm")
    reasons = [e["reason"] for e in history]
    assert reasons.index("Running") < reasons.index("Completed"), reasons
    running_event = history[reasons.index("Running")]
    assert all(n in running_event["message"] for n in record["nodes"]), running_event
    assert running_event["source"]["component"] == "hpc-bridge"
    assert running_event["involvedObject"]["uid"] == uid


def test_placement_pins_a_four_pod_trainjob_into_one_rack(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """4 pods of 16 CPUs fit in one rack of two 32-CPU kwok nodes; the bridge's
    placement pins them there (node affinity) instead of letting the scheduler spread."""
    ns = k8s_namespace
    apply(k8s, ns, trainjob("rack-local", nodes=4, cpu="16",
                            node_selector=None))
    k8s.wait_for(lambda: len([p for p in pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name="
                                                       "rack-local")
                              if p["spec"].get("nodeName")]) == 4, 90,
                 "4 pods scheduled")
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"]
             for n in k8s.get_json("nodes")["items"]}
    placed = [p["spec"]["nodeName"]
              for p in pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=rack-local")]
    racks = {nodes[n]["topology.hpc-bridge.io/rack"] for n in placed}
    assert len(racks) == 1, placed
    affinity = k8s.get_json("-n", ns, JOBSETS, "rack-local")["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert sorted(terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]) == sorted(
        set(placed))
    uid = k8s.get_json("-n", ns, TRAINJOBS, "rack-local")["metadata"]["uid"]
    placement = bridge.job(uid)["placement"]
    assert placement["pinned"] is True
    assert json.dumps(placement["levels"][0]["domains"]) == json.dumps(sorted(racks))


def test_deleting_a_trainjob_that_runs_on_slurm_cancels_the_slurm_job(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, trainjob("long-on-slurm", runtime="plain", nodes=1, image=None,
                            backend="slurm", command=["sleep", "300"]))
    k8s.wait_for(lambda: node_ready(k8s, ns, "long-on-slurm"), 60, "the Slurm job to run")
    uid = k8s.get_json("-n", ns, TRAINJOBS, "long-on-slurm")["metadata"]["uid"]
    slurm_id = bridge.job(uid)["backendId"]

    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "long-on-slurm", "--timeout=90s")

    (job,) = [j for j in squeue_bridge_jobs() if str(j["job_id"]) == slurm_id]
    assert job["job_state"] == "CANCELLED"
    assert bridge.job(uid)["state"] == "Cancelled"

