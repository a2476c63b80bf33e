"""The Kubeflow Python SDK (``kubeflow`` 0.5.0, ``TrainerClient``: pinned in
scripts/setup-python.sh) against the bridge on the real control plane, as a Kubeflow
user runs it: list, get, wait for ``Running`` and ``Complete``, events, delete — on a
TrainJob the bridge runs as a JobSet (kwok's pods go Running; one labelled to stay so)
and on one it routes to the real Slurm.

The SDK runs in its own environment (``.venv-kubeflow``) through
tests/integration/kubeflow_sdk_probe.py, and reads the runtimes the chart installs
(charts/hpc-bridge/files/runtimes.yaml).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup, wait_for
from tests.integration.k8s_bridge import (
    KWOK_STAY_RUNNING,
    TRAINJOBS,
    all_trainjobs,
    apply,
    k8s_daemon,
    node_ready,
    trainjob,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release
from tests.requirements import require
from tests.unit.test_runtime_steps import NAME as RUNTIME_NAME
from tests.unit.test_runtime_steps import runtime_doc

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SDK_PYTHON = REPO / ".venv-kubeflow" / "bin" / "python"
PROBE = Path(__file__).with_name("kubeflow_sdk_probe.py")
RUNTIMES = REPO / "charts" / "hpc-bridge" / "files" / "runtimes.yaml"


def sdk(k8s: K8sBed, namespace: str, *args: str, timeout: float = 150) -> Any:
    """One SDK action (kubeflow_sdk_probe.py), its JSON result."""
    proc = subprocess.run([str(SDK_PYTHON), str(PROBE), "--kubeconfig", k8s.kubeconfig,
                           "--namespace", namespace, *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"SDK {args}: rc {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]) -> Iterator[Daemon]:
    require(SDK_PYTHON.exists(), f"{SDK_PYTHON} is missing: scripts/setup-python.sh makes "
                                 f"it (the pinned Kubeflow SDK)")
    k8s.kubectl("apply", "-f", str(RUNTIMES))  # what the Helm chart installs
    daemon = k8s_daemon(k8s, k8s_namespace, slurm=testbed)
    daemon.start()
    yield daemon
    release(k8s, k8s_namespace, daemon)


def test_the_sdk_reads_the_runtimes_the_chart_installs(k8s: K8sBed, k8s_namespace: str,
                                                       bridge: Daemon) -> None:
    runtimes = {r["name"]: r for r in sdk(k8s, k8s_namespace, "runtimes")}
    assert {"plain", "torch-distributed", "mpi-distributed", "deepspeed-distributed",
            "jax-distributed", "xgboost-distributed"} <= set(runtimes)
    assert runtimes["torch-distributed"]["framework"] == "torch"
    assert all(r["image"] for r in runtimes.values())


def test_the_sdk_follows_a_trainjob_run_as_a_jobset(k8s: K8sBed, k8s_namespace: str,
                                                    bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, trainjob("sdk-runs", pod_labels={KWOK_STAY_RUNNING: "true"}),
          trainjob("sdk-done"))

    done = sdk(k8s, ns, "wait", "sdk-done", "Complete", "120")
    assert (done["status"], done["num_nodes"], done["runtime"]) == (
        "Complete", 2, "torch-distributed")
    running = sdk(k8s, ns, "wait", "sdk-runs", "Running", "120")
    assert running["status"] == "Running"
    assert sorted(s["name"] for s in running["steps"]) == ["node-0", "node-1"]
    assert {s["status"] for s in running["steps"]} == {"Running"}

    listed = {j["name"]: j["status"] for j in sdk(k8s, ns, "list")}
    assert listed == {"sdk-runs": "Running", "sdk-done": "Complete"}
    events = sdk(k8s, ns, "events", "sdk-done")
    reasons = [e["reason"] for e in events if e["kind"] == "TrainJob"]
    assert "Completed" in reasons, events
    assert all(e["name"] == "sdk-done" for e in events if e["kind"] == "TrainJob")

    assert sdk(k8s, ns, "delete", "sdk-runs") == {"deleted": "sdk-runs"}
    k8s.wait_for(lambda: "sdk-runs" not in {o["metadata"]["name"]
                                            for o in all_trainjobs(k8s, ns)}, 90,
                 "the bridge to stop the JobSet and let the TrainJob go")
    assert [j["name"] for j in sdk(k8s, ns, "list")] == ["sdk-done"]


def test_the_sdk_follows_a_trainjob_routed_to_slurm(k8s: K8sBed, k8s_namespace: str,
                                                   bridge: Daemon) -> None:
    """A job on Slurm has no pods: the SDK (which derives Running from pods) shows it
    ``Created`` while it runs, as documented (docs/kubernetes.md); its jobsStatus and
    events say it runs; Complete is Complete."""
    ns = k8s_namespace
    apply(k8s, ns, trainjob("sdk-slurm", runtime="plain", nodes=2, image=None,
                            backend="slurm", command=["sh", "-c", "sleep 6; hostname"]))
    k8s.wait_for(lambda: node_ready(k8s, ns, "sdk-slurm"), 60, "the Slurm job to run")
    assert sdk(k8s, ns, "get", "sdk-slurm")["status"] in ("Created", "Complete")
    done = sdk(k8s, ns, "wait", "sdk-slurm", "Complete", "120")
    assert (done["status"], done["runtime"], done["steps"]) == ("Complete", "plain", [])
    reasons = [e["reason"] for e in sdk(k8s, ns, "events", "sdk-slurm")]
    assert reasons.index("Running") < reasons.index("Completed"), reasons
    assert sdk(k8s, ns, "delete", "sdk-slurm") == {"deleted": "sdk-slurm"}
    k8s.wait_for(lambda: not all_trainjobs(k8s, ns),
                 60, "the TrainJob to go")


TRAINER_MANAGED_BY = "trainer.kubeflow.org/trainjob-controller"


def test_train_with_a_custom_trainer_runs_on_the_bridge_in_drop_in_mode(
        k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]) -> None:
    """``TrainerClient.train()`` cannot set ``managedBy``: its TrainJobs get Trainer's.
    A front door that claims Trainer's value (no Trainer controller in the cluster)
    runs them: the image comes from the runtime, the command from the SDK."""
    require(SDK_PYTHON.exists(), f"{SDK_PYTHON} is missing: scripts/setup-python.sh")
    ns = k8s_namespace
    k8s.kubectl("apply", "-f", str(RUNTIMES))
    daemon = k8s_daemon(k8s, ns, managed_by=[TRAINER_MANAGED_BY])
    daemon.start()
    try:
        name = sdk(k8s, ns, "train", "torch-distributed", "2")["name"]
        done = sdk(k8s, ns, "wait", name, "Complete", "120")
        assert (done["status"], done["num_nodes"]) == ("Complete", 2)
        obj = k8s.get_json("-n", ns, TRAINJOBS, name)
        assert obj["spec"]["managedBy"] == TRAINER_MANAGED_BY
        assert "image" not in obj["spec"]["trainer"]  # the runtime's, as under Trainer
        record = daemon.job(obj["metadata"]["uid"])
        assert record["state"] == "Succeeded" and record["backend"] == "kubernetes"
    finally:
        release(k8s, ns, daemon)


def trainer_webhook(name: str) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration as Trainer's controller installs one (never
    called: no namespace carries its selector's label)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "validator.trainjob.trainer.kubeflow.org",
            "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore", "timeoutSeconds": 1,
            "clientConfig": {"url": "https://127.0.0.1:9/validate"},
            "namespaceSelector": {"matchLabels": {"test.hpc-bridge.io/never": "true"}},
            "rules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["trainjobs"]}]}]}


def test_drop_in_mode_refuses_to_start_beside_a_trainer_controller(
        k8s: K8sBed, k8s_namespace: str) -> None:
    """Trainer's controller serves webhooks for TrainJobs: with one installed, a door
    that claims Trainer's managedBy does not start, saying why; the daemon serves on."""
    webhook = trainer_webhook(f"validator.trainer.kubeflow.org-{k8s_namespace}")
    k8s.kubectl("apply", "-f", "-", input=json.dumps(webhook))
    daemon = k8s_daemon(k8s, k8s_namespace, managed_by=[TRAINER_MANAGED_BY])
    try:
        daemon.start()
        wait_for(lambda: "refused to start" in daemon.log.read_text(), 60,
                 "the front door to refuse to start")
        log = daemon.log.read_text()
        assert "Trainer's controller is installed" in log
        assert f"ValidatingWebhookConfiguration/{webhook['metadata']['name']}" in log
        # The rest of the daemon serves on.
        assert daemon.proc is not None and daemon.proc.poll() is None
        assert daemon.api("GET", "/v1/healthz").json().get("ready")
    finally:
        k8s.kubectl("delete", "validatingwebhookconfiguration",
                    str(webhook["metadata"]["name"]), check=False)
        daemon.stop()
        cleanup(daemon.workdir)


def test_a_drop_in_door_stops_when_trainer_is_installed_later(
        k8s: K8sBed, k8s_namespace: str) -> None:
    """The door keeps watching the webhook configurations: Trainer installed while it
    runs stops it, saying why; jobs it started are left as they are, the daemon serves
    on."""
    ns = k8s_namespace
    webhook = trainer_webhook(f"validator.trainer.kubeflow.org-{ns}")
    daemon = k8s_daemon(k8s, ns, managed_by=[TRAINER_MANAGED_BY])
    daemon.start()
    try:
        apply(k8s, ns, trainjob("before", managed_by=TRAINER_MANAGED_BY,
                                pod_labels={KWOK_STAY_RUNNING: "true"}))
        uid = k8s.get_json("-n", ns, TRAINJOBS, "before")["metadata"]["uid"]
        k8s.wait_for(lambda: daemon.api("GET", f"/v1/jobs/{uid}").status_code == 200, 60,
                     "the drop-in door to admit it")
        daemon.wait_state(uid, ["Running"], 60)
        k8s.kubectl("apply", "-f", "-", input=json.dumps(webhook))
        wait_for(lambda: "front door stopped" in daemon.log.read_text(), 60,
                 "the front door to stop")
        log = daemon.log.read_text()
        assert "TrainJob front door" in log and " stops: " in log
        assert f"ValidatingWebhookConfiguration/{webhook['metadata']['name']}" in log
        assert daemon.proc is not None and daemon.proc.poll() is None
        assert daemon.api("GET", "/v1/healthz").json().get("ready")
        assert daemon.job(uid)["state"] == "Running"  # left to run
        # The door is gone: the job is ended through the daemon's API, as an admin would.
        assert daemon.api("POST", f"/v1/jobs/{daemon.job(uid)['id']}/cancel").status_code == 202
        daemon.wait_state(uid, ["Cancelled"])
    finally:
        k8s.kubectl("delete", "validatingwebhookconfiguration",
                    str(webhook["metadata"]["name"]), check=False)
        daemon.stop()
        for obj in all_trainjobs(k8s, ns):  # no door to remove its finalizer
            k8s.kubectl("-n", ns, "patch", TRAINJOBS, obj["metadata"]["name"],
                        "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        cleanup(daemon.workdir)


def test_train_with_a_builtin_torchtune_trainer_runs_its_initializers_first(
        k8s: K8sBed, k8s_namespace: str) -> None:
    """``TrainerClient.train()`` with a ``BuiltinTrainer(TorchTuneConfig)`` on a runtime
    shaped as Trainer v2.3's torchtune ones (initializer steps, a volume claim, the
    trainer's GPUs): the JobSet runs the dataset and model initializers, then the node
    with torchtune's completed command, on a volume JobSet claims (bound here to a
    static PersistentVolume: the bed has no provisioner); the job ends Complete."""
    require(SDK_PYTHON.exists(), f"{SDK_PYTHON} is missing: scripts/setup-python.sh")
    ns = k8s_namespace
    runtime = runtime_doc()
    runtime["spec"]["template"]["spec"]["volumeClaimPolicies"][0]["templates"][0]["spec"][
        "storageClassName"] = ""  # the static volume below, never a default class
    pv = f"{ns}-initializer"
    daemon = k8s_daemon(k8s, ns, managed_by=[TRAINER_MANAGED_BY])
    try:
        k8s.kubectl("apply", "-f", "-", input=json.dumps(runtime))
        k8s.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "", "hostPath": {"path": f"/tmp/{pv}"}}}))
        daemon.start()
        name = sdk(k8s, ns, "tune", RUNTIME_NAME)["name"]
        wait_for(lambda: k8s.kubectl("-n", ns, "get", "jobsets.jobset.x-k8s.io", name,
                                     check=False).returncode == 0, 60, f"JobSet {name}")
        jobset = k8s.get_json("-n", ns, "jobsets.jobset.x-k8s.io", name)
        rjobs = {rj["name"]: rj for rj in jobset["spec"]["replicatedJobs"]}
        assert list(rjobs) == ["dataset-initializer", "model-initializer", "node"]
        assert [d["name"] for d in rjobs["node"]["dependsOn"]] == [
            "dataset-initializer", "model-initializer"]
        assert jobset["spec"]["volumeClaimPolicies"]
        node = rjobs["node"]["template"]["spec"]["template"]["spec"]["containers"][0]
        assert node["command"][:5] == ["tune", "run", "full_finetune_single_device",
                                       "--config", "llama3_2/1B_full_single_device"]
        assert "dtype=bf16" in node["args"] and "epochs=1" in node["args"]
        dataset = rjobs["dataset-initializer"]["template"]["spec"]["template"]["spec"][
            "containers"][0]
        assert {"name": "STORAGE_URI", "value": "hf://tatsu-lab/alpaca/data"} in dataset["env"]
        done = sdk(k8s, ns, "wait", name, "Complete", "150", timeout=200)
        assert done["status"] == "Complete"
        # JobSet made the claim (<template>-<jobset>), bound to the static volume.
        claim = k8s.get_json("-n", ns, "pvc", f"initializer-{name}")
        assert (claim["status"]["phase"], claim["spec"]["volumeName"]) == ("Bound", pv)
        obj = k8s.get_json("-n", ns, TRAINJOBS, name)
        assert daemon.job(obj["metadata"]["uid"])["state"] == "Succeeded"
    finally:
        release(k8s, ns, daemon)
        k8s.kubectl("delete", "clustertrainingruntimes.trainer.kubeflow.org", RUNTIME_NAME,
                    "--ignore-not-found", check=False)
        k8s.kubectl("delete", "pv", pv, "--ignore-not-found", "--wait=false", check=False)
