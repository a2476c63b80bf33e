"""Pod logs where a kubelet serves them: on the bed, kwok's kubelet API (its ClusterLogs
objects name a file per container, testbed/k8s/k8s.sh), reached through the apiserver
as ``kubectl logs`` reaches a kubelet. The bridge's ``tlog`` of a TrainJob run as a
JobSet and the Kubeflow SDK's ``TrainerClient.get_job_logs`` both read the trainer
pod's log there (kwok runs no containers: the log is the file's)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.integration.bed import Daemon, shared_dir
from tests.integration.k8s_bridge import (
    JOBSETS,
    KWOK_STAY_RUNNING,
    apply,
    k8s_daemon,
    node_ready,
    pods,
    trainjob,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release
from tests.integration.test_kubeflow_sdk import RUNTIMES, SDK_PYTHON, sdk
from tests.requirements import require

pytestmark = pytest.mark.integration

LINES = ["epoch 1 loss 0.91", "epoch 2 loss 0.42 'quoted' $(not run)", "done"]


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    require(SDK_PYTHON.exists(), f"{SDK_PYTHON} is missing: scripts/setup-python.sh makes it")
    k8s.kubectl("apply", "-f", str(RUNTIMES))  # the SDK reads the job's runtime
    daemon = k8s_daemon(k8s, k8s_namespace)
    daemon.start()
    yield daemon
    release(k8s, k8s_namespace, daemon)


def test_tlog_and_the_sdk_read_the_trainer_pods_log(k8s: K8sBed, k8s_namespace: str,
                                                    bridge: Daemon) -> None:
    ns = k8s_namespace
    where = shared_dir("hpcb-kwok-logs-")
    logs = where / "node.log"
    # The CRI log format a kubelet keeps (what kwok serves from the file).
    logs.write_text("".join(f"2026-12-06T10:00:0{i}.000000000Z stdout F {line}\n"
                            for i, line in enumerate(LINES)))
    rules = f"logs-{ns}"
    try:
        apply(k8s, ns, {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs",
                        "metadata": {"name": rules},
                        "spec": {"selector": {"matchNamespaces": [ns]},
                                 "logs": [{"containers": ["node"], "logsFile": str(logs)}]}})
        apply(k8s, ns, trainjob("logs", pod_labels={KWOK_STAY_RUNNING: "true"}))
        k8s.wait_for(lambda: node_ready(k8s, ns, "logs"), 90, "the TrainJob's pods to run")
        first = sorted(p["metadata"]["name"] for p in pods(
            k8s, ns, "jobset.sigs.k8s.io/jobset-name=logs"))[0]

        def served() -> bool:  # kwok takes the ClusterLogs in from its watch
            out = k8s.kubectl("-n", ns, "logs", first, "-c", "node", check=False)
            return out.returncode == 0 and LINES[-1] in out.stdout

        k8s.wait_for(served, 60, "kwok's kubelet API to serve the pod's log")
        job_id = k8s.get_json("-n", ns, JOBSETS, "logs")["metadata"]["labels"][
            "hpc-bridge.io/job-id"]
        out = bridge.cli("root", "tlog", job_id)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == LINES, out.stdout
        assert sdk(k8s, ns, "logs", "logs") == LINES
    finally:
        k8s.kubectl("delete", "clusterlogs.kwok.x-k8s.io", rules, "--ignore-not-found",
                    check=False)
        shutil.rmtree(where, ignore_errors=True)
