"""TrainJobs that a real Kueue queues (``sigs.k8s.io/kueue``, built from its Go module and
run by testbed/k8s/kueue.sh: its TrainJob integration, in namespaces labelled for it)
and the bridge runs (k8s_adapter/kueue.py, docs/kubernetes.md "Kueue").

Each test makes its own ResourceFlavors (the kwok nodes' racks, as node labels), a
ClusterQueue with a CPU quota and a LocalQueue ``q`` in its namespace. The bridge's test
daemon pins pods to the hosts its placement chose (``nodelist``); for a job Kueue
queues it must not: Kueue's flavor decides.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, shared_dir
from tests.integration.k8s_bridge import (
    JOBSETS,
    KWOK_STAY_RUNNING,
    TRAINJOBS,
    apply,
    conditions,
    is_true,
    jobsets,
    k8s_daemon,
    node_ready,
    pods,
    trainjob,
    wait_condition,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release
from tests.integration.test_kubeflow_sdk import RUNTIMES
from tests.requirements import require

pytestmark = pytest.mark.integration

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RACK = "topology.hpc-bridge.io/rack"
WORKLOADS = "workloads.kueue.x-k8s.io"
CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
FLAVORS = "resourceflavors.kueue.x-k8s.io"


def flavor(name: str, rack: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {RACK: rack}}}


def cluster_queue(name: str, flavors: list[tuple[str, int]]) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": name}},
                "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                    {"name": f, "resources": [{"name": "cpu", "nominalQuota": cpu}]}
                    for f, cpu in flavors]}]}}


def queued(name: str, **fields: Any) -> dict[str, Any]:
    """A TrainJob in LocalQueue ``q`` (2 nodes, 1 CPU each)."""
    doc = trainjob(name, **fields)
    doc["metadata"]["labels"] = {QUEUE_LABEL: "q"}
    return doc


@pytest.fixture
def queues(k8s: K8sBed, k8s_namespace: str) -> Iterator[str]:
    """The namespace, under Kueue, with its LocalQueue ``q``; the ClusterQueue is named
    after the namespace, its flavors ``NS-rack1`` and ``NS-rack2``."""
    label = k8s.env.get("KUEUE_NAMESPACE_LABEL")
    require(label, "the Kubernetes bed runs no Kueue (testbed/k8s/k8s.sh up starts it; "
                   "an older bed: run it again)")
    ns = k8s_namespace
    k8s.kubectl("label", "namespace", ns, f"{label}=true")
    k8s.kubectl("apply", "-f", str(RUNTIMES))  # Kueue reads the TrainJob's runtime
    apply(k8s, ns, flavor(f"{ns}-rack1", "rack-1"), flavor(f"{ns}-rack2", "rack-2"),
          cluster_queue(ns, [(f"{ns}-rack1", 2)]),
          {"apiVersion": KUEUE_API, "kind": "LocalQueue",
           "metadata": {"name": "q", "namespace": ns}, "spec": {"clusterQueue": ns}})
    yield ns
    k8s.kubectl("delete", CLUSTER_QUEUES, ns, "--wait=false", "--ignore-not-found",
                check=False)
    k8s.kubectl("delete", FLAVORS, f"{ns}-rack1", f"{ns}-rack2", "--wait=false",
                "--ignore-not-found", check=False)


@pytest.fixture
def bridge(k8s: K8sBed, queues: str) -> Iterator[Daemon]:
    daemon = k8s_daemon(k8s, queues)
    daemon.start()
    yield daemon
    release(k8s, queues, daemon)


@pytest.fixture
def hybrid(k8s: K8sBed, queues: str, testbed: dict[str, str]) -> Iterator[Daemon]:
    """The bridge with the Slurm back end too (the ``hpc-bridge.io/backend`` annotation)."""
    daemon = k8s_daemon(k8s, queues, slurm=testbed)
    daemon.start()
    yield daemon
    release(k8s, queues, daemon)


def pod_template(k8s: K8sBed, ns: str, name: str) -> dict[str, Any]:
    jobset = k8s.get_json("-n", ns, JOBSETS, name)
    template: dict[str, Any] = jobset["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]
    return template


def running_on(k8s: K8sBed, ns: str, name: str) -> set[str]:
    """The nodes of the JobSet's Running pods."""
    return {p["spec"].get("nodeName", "") for p in pods(
        k8s, ns, f"jobset.sigs.k8s.io/jobset-name={name}")
        if p["status"].get("phase") == "Running"}


def racks_of(k8s: K8sBed, nodes: set[str]) -> set[str]:
    return {k8s.get_json("node", n)["metadata"]["labels"].get(RACK, "") for n in nodes}


def workload_of(k8s: K8sBed, ns: str, name: str) -> str:
    uid = k8s.get_json("-n", ns, TRAINJOBS, name)["metadata"]["uid"]
    items = k8s.get_json("-n", ns, WORKLOADS, "-l", f"kueue.x-k8s.io/job-uid={uid}")["items"]
    assert len(items) == 1, items
    return str(items[0]["metadata"]["name"])


def test_kueue_admits_within_its_quota_and_the_rest_wait_saying_why(
        k8s: K8sBed, queues: str, bridge: Daemon) -> None:
    ns = queues
    apply(k8s, ns, queued("first", pod_labels={KWOK_STAY_RUNNING: "true"}))
    k8s.wait_for(lambda: len(running_on(k8s, ns, "first")) == 2, 90,
                 "Kueue to admit the first TrainJob and its two pods to run")
    # On the admitted flavor's rack, and not pinned by the bridge's placement.
    assert racks_of(k8s, running_on(k8s, ns, "first")) == {"rack-1"}
    template = pod_template(k8s, ns, "first")
    assert template["spec"]["nodeSelector"][RACK] == "rack-1"
    assert "kubernetes.io/hostname" not in json.dumps(template["spec"].get("affinity") or {})
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "node"

    # The quota is used up: the second waits, suspended, with Kueue's reason.
    apply(k8s, ns, queued("second"))

    def held() -> bool:  # (Kueue's scheduler writes its message after the Workload)
        c = conditions(k8s, ns, "second").get("Suspended") or {}
        return (c.get("status") == "True" and c.get("reason") == "Pending"
                and "insufficient" in c.get("message", ""))

    k8s.wait_for(held, 60, "the second TrainJob to wait with Kueue's reason")
    message = conditions(k8s, ns, "second")["Suspended"]["message"]
    assert message.startswith("TrainJob is suspended: Kueue: "), message
    assert "insufficient" in message and "cpu" in message, message
    assert k8s.get_json("-n", ns, TRAINJOBS, "second")["spec"]["suspend"] is True
    assert "second" not in {j["metadata"]["name"] for j in jobsets(k8s, ns)}

    # The first goes: Kueue admits the second, which runs to the end.
    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "first", "--wait=false")
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "second"), "Complete"), 120,
                 "the second TrainJob to be admitted and complete")
    suspended = conditions(k8s, ns, "second")["Suspended"]
    assert (suspended["status"], suspended["reason"]) == ("False", "Resumed")


def test_a_job_kueue_stops_and_admits_again_moves_to_the_new_flavor(
        k8s: K8sBed, queues: str, bridge: Daemon) -> None:
    ns = queues
    apply(k8s, ns, cluster_queue(ns, [(f"{ns}-rack1", 2), (f"{ns}-rack2", 2)]),
          queued("moved", pod_labels={KWOK_STAY_RUNNING: "true"}))
    k8s.wait_for(lambda: racks_of(k8s, running_on(k8s, ns, "moved")) == {"rack-1"}, 90,
                 "the TrainJob to run on rack-1 (the first flavor)")
    workload = workload_of(k8s, ns, "moved")
    # rack-2 first from now on (before the stop: Kueue's cache has it when it admits).
    apply(k8s, ns, cluster_queue(ns, [(f"{ns}-rack2", 2), (f"{ns}-rack1", 2)]))

    # Kueue stops it (the Workload deactivated): suspended, pods gone, JobSet kept.
    k8s.kubectl("-n", ns, "patch", WORKLOADS, workload, "--type=merge",
                "-p", '{"spec":{"active":false}}')
    k8s.wait_for(lambda: k8s.get_json("-n", ns, JOBSETS, "moved")["spec"].get("suspend")
                 and not running_on(k8s, ns, "moved"), 90,
                 "the JobSet to be suspended and its pods to go")
    assert is_true(conditions(k8s, ns, "moved"), "Suspended")

    # Admitted again, now on rack-2: the JobSet resumes there.
    k8s.kubectl("-n", ns, "patch", WORKLOADS, workload, "--type=merge",
                "-p", '{"spec":{"active":true}}')
    k8s.wait_for(lambda: racks_of(k8s, running_on(k8s, ns, "moved")) == {"rack-2"}, 90,
                 "the TrainJob to run again, on rack-2")
    template = pod_template(k8s, ns, "moved")
    assert template["spec"]["nodeSelector"][RACK] == "rack-2"
    assert not is_true(conditions(k8s, ns, "moved"), "Suspended")


def test_kueue_quota_gates_a_trainjob_routed_to_slurm(k8s: K8sBed, queues: str,
                                                     hybrid: Daemon) -> None:
    """Kueue's quota holds a TrainJob the bridge runs on Slurm as it holds one with pods:
    the second waits, suspended and not in Slurm, until the first is complete."""
    ns = queues
    slurm = {"backend": "slurm", "runtime": "plain", "image": None}
    shared = shared_dir("hpcb-kueue-")
    release = shared / "release"  # the job (alice's) waits for it
    apply(k8s, ns, queued("on-slurm", command=[
        "sh", "-c", f"until [ -e {release} ]; do sleep 0.2; done; hostname"], **slurm))
    k8s.wait_for(lambda: node_ready(k8s, ns, "on-slurm"), 90,
                 "Kueue to admit the TrainJob and Slurm to run it")
    apply(k8s, ns, queued("after", command=["hostname"], **slurm))
    k8s.wait_for(lambda: (conditions(k8s, ns, "after").get("Suspended") or {}).get(
        "reason") == "Pending", 60, "the second to wait for Kueue's quota")
    assert not is_true(conditions(k8s, ns, "on-slurm"), "Complete")
    release.touch()
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "after"), "Complete"), 120,
                 "the second to run on Slurm once the first is complete")
    assert is_true(conditions(k8s, ns, "on-slurm"), "Complete")
    shutil.rmtree(shared, ignore_errors=True)


def test_kueue_topology_aware_scheduling_places_the_pods_in_one_rack(
        k8s: K8sBed, queues: str, bridge: Daemon) -> None:
    """A TrainJob asks Kueue for one rack (its ``podset-required-topology`` annotation in
    a runtime patch): Kueue's Topology Aware Scheduling admits it with its scheduling
    gate on the pods, which the bridge lays out; Kueue then names each pod's node and
    lifts the gate, and the two pods run in one rack."""
    ns = queues
    levels = tas_queue(k8s, ns)
    try:
        apply(k8s, ns, queued("tas", pod_labels={KWOK_STAY_RUNNING: "true"}, pod_annotations={
            "kueue.x-k8s.io/podset-required-topology": levels[1]}))
        k8s.wait_for(lambda: sum(p["status"].get("phase") == "Running" for p in pods(
            k8s, ns, "jobset.sigs.k8s.io/jobset-name=tas")) == 2, 90,
                     "Kueue to admit the TrainJob with a topology and its pods to run")
        # (Kueue's best fit may put both on one node: 1 CPU each, 32 a node.)
        assert len(racks_of(k8s, running_on(k8s, ns, "tas"))) == 1
        template = pod_template(k8s, ns, "tas")
        assert {"name": "kueue.x-k8s.io/topology"} in template["spec"]["schedulingGates"]
        for p in pods(k8s, ns, "jobset.sigs.k8s.io/jobset-name=tas"):
            assert not p["spec"].get("schedulingGates"), p["spec"]
    finally:
        drop_tas_queue(k8s, ns)


def test_a_flavor_toleration_of_a_reserved_taint_fails_the_job_naming_the_setting(
        k8s: K8sBed, queues: str, bridge: Daemon) -> None:
    """Kueue's entry is checked as a user's patch: a flavor that tolerates the Slurm
    pool's taint (which only the pool's own pods may) is refused at submission."""
    ns = queues
    risky = flavor(f"{ns}-tolerant", "rack-1")
    risky["spec"]["tolerations"] = [{"key": "hpc-bridge.io/slurm-pool", "operator": "Exists",
                                     "effect": "NoSchedule"}]
    try:
        apply(k8s, ns, risky, cluster_queue(ns, [(f"{ns}-tolerant", 2)]))
        apply(k8s, ns, queued("tolerant"))
        message = wait_condition(k8s, ns, "tolerant", "Failed", 90,
                                 "the TrainJob admitted on a tolerant flavor to fail")["message"]
        assert "tolerations" in message and "allow_privileges" in message, message
        assert "tolerant" not in {j["metadata"]["name"] for j in jobsets(k8s, ns)}
    finally:
        k8s.kubectl("-n", ns, "delete", TRAINJOBS, "--all", "--wait=false", check=False)
        k8s.kubectl("delete", FLAVORS, f"{ns}-tolerant", "--wait=false",
                    "--ignore-not-found", check=False)


def tas_queue(k8s: K8sBed, ns: str) -> list[str]:
    """A Topology (block, rack, host), a flavor on it and the namespace's ClusterQueue
    on that flavor; the level labels, widest first."""
    levels = [f"topology.hpc-bridge.io/{lvl}" for lvl in ("block", "rack")]
    apply(k8s, ns,
          {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": ns},
           "spec": {"levels": [{"nodeLabel": k} for k in
                               [*levels, "kubernetes.io/hostname"]]}},
          {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": f"{ns}-tas"},
           "spec": {"nodeLabels": {levels[0]: "block-a"}, "topologyName": ns}},
          cluster_queue(ns, [(f"{ns}-tas", 4)]))
    return levels


def drop_tas_queue(k8s: K8sBed, ns: str) -> None:
    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "--all", "--wait=false", check=False)
    k8s.kubectl("delete", "topologies.kueue.x-k8s.io", ns, "--wait=false",
                "--ignore-not-found", check=False)
    k8s.kubectl("delete", FLAVORS, f"{ns}-tas", "--wait=false", "--ignore-not-found",
                check=False)


@pytest.fixture
def webhook(k8s: K8sBed, queues: str, tmp_path: Path) -> Iterator[Daemon]:
    """The bridge with its topology webhook on a free port, registered for TrainJobs
    created in the namespace (docs/kubernetes.md, "Kueue")."""
    ns = queues
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    daemon = k8s_daemon(k8s, ns, webhook_listen=f"127.0.0.1:{port}",
                        webhook_tls_cert=str(cert), webhook_tls_key=str(key))
    daemon.start()
    config = f"hpc-bridge-topology-{ns}"
    apply(k8s, ns, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": config},
        "webhooks": [{
            "name": "topology.hpc-bridge.io", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Ignore", "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate-trainjob",
                             "caBundle": base64.b64encode(cert.read_bytes()).decode()},
            "rules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE"], "resources": ["trainjobs"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}]})
    yield daemon
    k8s.kubectl("delete", "mutatingwebhookconfigurations", config, "--ignore-not-found",
                check=False)
    release(k8s, ns, daemon)


def with_switches(doc: dict[str, Any], switches: str) -> dict[str, Any]:
    """``doc`` with sbatch's ``--switches`` as the bridge's scheduling annotation."""
    count, _, wait = switches.partition("@")
    options: dict[str, Any] = {"switches": int(count)}
    if wait:
        options["switches_wait_minutes"] = int(wait)
    doc["metadata"].setdefault("annotations", {})[
        "hpc-bridge.io/scheduling"] = json.dumps(options)
    return doc


def podset_topology(k8s: K8sBed, ns: str, name: str, podset: str = "node"
                    ) -> dict[str, Any]:
    """The topology request of the TrainJob's Workload for pod set ``podset`` ({}:
    none, or no Workload yet)."""
    uid = k8s.get_json("-n", ns, TRAINJOBS, name)["metadata"]["uid"]
    items = k8s.get_json("-n", ns, WORKLOADS, "-l", f"kueue.x-k8s.io/job-uid={uid}")["items"]
    for item in items:
        for each in item["spec"]["podSets"]:
            if each["name"] == podset:
                return dict(each.get("topologyRequest") or {})
    return {}


def test_the_bridges_switch_request_reaches_kueue_as_a_topology_request(
        k8s: K8sBed, queues: str, webhook: Daemon) -> None:
    """``--switches=1`` (the scheduling annotation) becomes Kueue's required topology at
    the rack level (the bridge's leaf switches) when the TrainJob is created, so the
    first Workload asks for it, Kueue admits it in one rack and the pods run there;
    ``--switches=2`` and ``--switches=1@5`` (Slurm runs those anyway, in the end) become
    a preferred one. A job that asks Kueue itself keeps its own request, and its
    ``--switches`` is refused."""
    ns = queues
    levels = tas_queue(k8s, ns)
    rack = levels[1]
    try:
        stay = {KWOK_STAY_RUNNING: "true"}
        apply(k8s, ns, with_switches(queued("one-rack", pod_labels=stay), "1"))
        k8s.wait_for(lambda: podset_topology(k8s, ns, "one-rack"), 60, "the Workload")
        assert podset_topology(k8s, ns, "one-rack")["required"] == rack
        patches = k8s.get_json("-n", ns, TRAINJOBS, "one-rack")["spec"]["runtimePatches"]
        assert {p["manager"] for p in patches} >= {"kueue.x-k8s.io/manager",
                                                  "hpc-bridge.io/placement"}, patches
        k8s.wait_for(lambda: sum(p["status"].get("phase") == "Running" for p in pods(
            k8s, ns, "jobset.sigs.k8s.io/jobset-name=one-rack")) == 2, 90,
                     "Kueue to admit the TrainJob in one rack and its pods to run")
        assert len(racks_of(k8s, running_on(k8s, ns, "one-rack"))) == 1
        for name, switches in (("two-racks", "2"), ("wait-for-one", "1@5")):
            apply(k8s, ns, with_switches(queued(name), switches))
            k8s.wait_for(lambda n=name: podset_topology(k8s, ns, n), 60, "the Workload")
            assert podset_topology(k8s, ns, name)["preferred"] == rack, name
        own = queued("own", pod_annotations={
            "kueue.x-k8s.io/podset-required-topology": levels[0]})
        apply(k8s, ns, with_switches(own, "1"))
        k8s.wait_for(lambda: podset_topology(k8s, ns, "own"), 60, "the Workload")
        assert podset_topology(k8s, ns, "own")["required"] == levels[0]
        assert "hpc-bridge.io/placement" not in json.dumps(
            k8s.get_json("-n", ns, TRAINJOBS, "own")["spec"])
        # ... and --switches beside it is refused, not dropped without a word.
        failed = wait_condition(k8s, ns, "own", "Failed", 60,
                                "the TrainJob asking twice to be refused")
        assert "asks Kueue for a topology itself" in failed["message"]
    finally:
        drop_tas_queue(k8s, ns)


def test_an_mpi_jobs_launcher_and_workers_are_one_topology_group_in_one_rack(
        k8s: K8sBed, queues: str, webhook: Daemon) -> None:
    """An MPI TrainJob's launcher and workers are separate replicated jobs, so separate
    pod sets for Kueue: with ``--switches=1`` both ask for the rack level in one pod-set
    group (``hpc-bridge-ranks``), so Kueue fits them in one rack together, where the
    pods are placed (a launcher in one rack and its workers in another would cross the
    switches the job asked not to cross)."""
    ns = queues
    rack = tas_queue(k8s, ns)[1]
    try:
        apply(k8s, ns, with_switches(queued("mpi-rack", runtime="mpi-distributed",
                                            command=["mpirun", "hostname"]), "1"))
        for podset in ("launcher", "node"):
            k8s.wait_for(lambda p=podset: podset_topology(k8s, ns, "mpi-rack", p), 60,
                         f"the Workload's {podset} pod set")
            request = podset_topology(k8s, ns, "mpi-rack", podset)
            assert (request.get("required"), request.get("podSetGroupName")) == (
                rack, "hpc-bridge-ranks"), (podset, request)
        # The launcher ends at once under kwok (only the workers stay running): where
        # the pods were placed, whatever their phase, is what is compared.
        def placed() -> list[str]:
            return [p["spec"].get("nodeName", "") for p in pods(
                k8s, ns, "jobset.sigs.k8s.io/jobset-name=mpi-rack")]

        k8s.wait_for(lambda: len(hosts := placed()) == 2 and all(hosts), 90,
                     "Kueue to admit the MPI TrainJob and its two pods to be placed")
        assert len(racks_of(k8s, set(placed()))) == 1, placed()
    finally:
        drop_tas_queue(k8s, ns)


def test_without_the_webhook_a_queued_switch_request_is_refused_naming_it(
        k8s: K8sBed, queues: str, bridge: Daemon) -> None:
    """No webhook: Kueue built the Workload without the request (and never rebuilds
    it for an annotation), so the bridge refuses the job rather than drop
    ``--switches`` without a word. (Without Kueue ``--switches`` is refused on
    Kubernetes as before: tests/unit/test_option_support.py.)"""
    ns = queues
    tas_queue(k8s, ns)
    try:
        apply(k8s, ns, with_switches(queued("no-webhook"), "1"))
        try:
            failed = wait_condition(k8s, ns, "no-webhook", "Failed", 60,
                                    "the TrainJob to be refused")
        except BaseException:  # what the bridge and the cluster had, for the report
            print("TrainJob:", json.dumps(k8s.get_json("-n", ns, TRAINJOBS, "no-webhook")))
            print("jobs:", json.dumps(bridge.api("GET", "/v1/jobs").json())[:3000])
            print("daemon log:", bridge.log.read_text()[-6000:])
            raise
        message = failed["message"]
        assert "switches" in message and "topology webhook" in message, message
        assert not jobsets(k8s, ns)
    finally:
        drop_tas_queue(k8s, ns)
