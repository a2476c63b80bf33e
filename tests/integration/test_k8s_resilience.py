"""Crashes and outages with TrainJob CRs: the bridge killed mid-run, the apiserver
restarted mid-run. Nothing is lost, nothing is submitted twice.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.integration.bed import REPO, Daemon, squeue_bridge_jobs
from tests.integration.k8s_bridge import (
    all_trainjobs,
    apply,
    is_true,
    jobsets,
    k8s_daemon,
    trainjob,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release

pytestmark = pytest.mark.integration


def _conds(obj: dict[str, object]) -> dict[str, dict[str, object]]:
    status = obj.get("status") or {}
    assert isinstance(status, dict)
    return {c["type"]: c for c in status.get("conditions") or []}


def _complete(k8s: K8sBed, namespace: str) -> int:
    return sum(is_true(_conds(o), "Complete") for o in all_trainjobs(k8s, namespace))


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]) -> Iterator[Daemon]:
    daemon = k8s_daemon(k8s, k8s_namespace, slurm=testbed)
    daemon.start()
    yield daemon
    if daemon.proc is None or daemon.proc.poll() is not None:
        daemon.start()
    release(k8s, k8s_namespace, daemon)


def test_bridge_killed_in_the_middle_of_100_trainjobs_loses_none_and_doubles_none(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    on_k8s = [trainjob(f"k-{i:03d}", runtime="plain", nodes=1, cpu="100m",
                       command=["true"]) for i in range(80)]
    on_slurm = [trainjob(f"s-{i:03d}", runtime="plain", nodes=1, image=None, backend="slurm",
                         command=["true"]) for i in range(20)]
    docs = [*[d for pair in zip(on_k8s[::4], on_slurm, strict=True) for d in pair],
            *[d for i, d in enumerate(on_k8s) if i % 4]]
    # kubectl creates them one by one (seconds for 100); the bridge works meanwhile.
    applying = subprocess.Popen(
        [k8s.kubectl_path, "--kubeconfig", k8s.kubeconfig, "-n", ns, "create", "-f", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert applying.stdin is not None
    applying.stdin.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    applying.stdin.close()

    # Kill -9 as soon as the first are in their worlds (the rest follow within seconds).
    k8s.wait_for(lambda: k8s.kubectl("-n", ns, "get", "jobsets.jobset.x-k8s.io", "-o", "name"
                                     ).stdout.strip(), 60, "the first JobSet")
    bridge.kill()
    assert applying.wait(120) == 0
    made_before = len(jobsets(k8s, ns))
    assert made_before < 80, "the bridge finished before it was killed: kill sooner"
    time.sleep(1)
    bridge.start()

    k8s.wait_for(lambda: _complete(k8s, ns) == 100, 300, "all 100 TrainJobs Complete")

    trainjobs = {o["metadata"]["name"]: o for o in all_trainjobs(k8s, ns)}
    assert len(trainjobs) == 100
    uids = {name: o["metadata"]["uid"] for name, o in trainjobs.items()}
    # Exactly one JobSet per Kubernetes TrainJob …
    js_uids = Counter(j["metadata"]["labels"]["hpc-bridge.io/job-uid"] for j in jobsets(k8s, ns))
    assert sorted(js_uids) == sorted(uids[d["metadata"]["name"]] for d in on_k8s)
    assert set(js_uids.values()) == {1}
    # … and exactly one Slurm job per Slurm TrainJob.
    wanted = {uids[d["metadata"]["name"]] for d in on_slurm}
    comments = Counter(str(j["comment"]).removeprefix("hpc-bridge:")
                       for j in squeue_bridge_jobs())
    assert {u: comments[u] for u in wanted} == dict.fromkeys(wanted, 1)
    # Every status is right, and the store agrees.
    for name, obj in trainjobs.items():
        conds = _conds(obj)
        assert conds["Complete"]["status"] == "True", (name, conds)
        assert "Failed" not in conds
        record = bridge.job(uids[name])
        assert record["state"] == "Succeeded"
        assert record["backend"] == ("slurm" if name.startswith("s-") else "kubernetes")


def test_the_apiserver_restarted_mid_run_is_survived(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, *[trainjob(f"a-{i:02d}", runtime="plain", nodes=1, cpu="100m",
                              command=["true"]) for i in range(10)])
    subprocess.run(["bash", str(REPO / "testbed" / "k8s" / "k8s.sh"), "restart-apiserver"],
                   check=True, timeout=180, capture_output=True)
    k8s.wait_for(k8s.apiserver_ready, 60, "the apiserver to be ready again")
    # TrainJobs created after the restart reach the bridge through its resumed watch.
    apply(k8s, ns, *[trainjob(f"b-{i:02d}", runtime="plain", nodes=1, cpu="100m",
                              command=["true"]) for i in range(10)])
    # After a restart kube-scheduler can take a minute or two to resume (its watches
    # re-list with backoff): the timeout is for the scheduler, not the bridge.
    k8s.wait_for(lambda: _complete(k8s, ns) == 20, 300, "all 20 TrainJobs Complete")
    js_uids = Counter(j["metadata"]["labels"]["hpc-bridge.io/job-uid"] for j in jobsets(k8s, ns))
    assert len(js_uids) == 20 and set(js_uids.values()) == {1}
    assert bridge.proc is not None and bridge.proc.poll() is None
