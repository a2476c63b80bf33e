"""Two replicas under leader election (a coordination.k8s.io Lease on the bed's
apiserver). Replicas share nothing but the apiserver and the back ends (each has its
own state directory, as pods of a Deployment with an emptyDir): the standby serves
only its health endpoint and writes nothing; a new leader rebuilds its store from the
TrainJob CRs and the back ends. Killing the leader in the middle of 100 TrainJobs
(80 on Kubernetes, 20 on Slurm) runs every one exactly once; a frozen leader that
lost its lease exits (status 3) the moment it runs again. Handover times are printed
(docs/operations.md quotes them)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.integration.bed import BIN, Daemon, cleanup, squeue_bridge_jobs
from tests.integration.k8s_bridge import (
    TRAINJOBS,
    all_trainjobs,
    apply,
    is_true,
    jobsets,
    k8s_daemon,
    trainjob,
)
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration

#: Short lease times so the test is quick (the chart's defaults are 15/10/2 s); a renew
#: deadline of 3 s proved too short for a leader rebuilding 100 jobs on 2 busy cores.
LEASE = {"lease_duration": 8, "renew_deadline": 6, "retry_period": 1}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Replica:
    daemon: Daemon
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.daemon.write_config()
        self.proc = subprocess.Popen(
            [str(BIN / "hpc-bridge"), "serve", "--config", str(self.daemon.config)],
            stdin=subprocess.DEVNULL, stdout=self.daemon.log.open("ab"),
            stderr=subprocess.STDOUT)
        self.daemon.proc = self.proc

    def health(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = httpx.get(f"http://127.0.0.1:{self.port}/v1/healthz",
                                             timeout=2).json()
            return data
        except (httpx.HTTPError, ValueError):
            return None

    def ready_status(self) -> int:
        return httpx.get(f"http://127.0.0.1:{self.port}/v1/healthz?ready=1", timeout=5
                         ).status_code

    def is_(self, role: str, ready: bool) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"replica exited with {self.proc.returncode}:\n"
                                 + self.daemon.log.read_text()[-3000:])
        h = self.health()
        return h is not None and h["role"] == role and h["ready"] is ready

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def replica(k8s: K8sBed, namespace: str, slurm: dict[str, str], lease: str) -> Replica:
    daemon = k8s_daemon(k8s, namespace, slurm=slurm)
    port = _free_port()
    daemon.daemon_settings["health"] = f"127.0.0.1:{port}"
    settings = {"kind": "kubernetes", "kubeconfig": k8s.kubeconfig, "namespace": namespace,
                "lease": lease, **LEASE}
    daemon.extra_toml += "\n[leader_election]\n" + "".join(
        f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    daemon.workdir.mkdir(parents=True, exist_ok=True)
    return Replica(daemon, port)


@pytest.fixture
def pair(k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]
         ) -> Iterator[tuple[Replica, Replica]]:
    a = replica(k8s, k8s_namespace, testbed, "bridge-leader")
    b = replica(k8s, k8s_namespace, testbed, "bridge-leader")
    a.start()
    k8s.wait_for(lambda: a.is_("leader", True), 60, "replica A to lead")
    b.start()
    k8s.wait_for(lambda: b.is_("standby", False), 60, "replica B to stand by")
    # The readiness probe's view: only the leader is Ready.
    assert [r.ready_status() for r in (a, b)] == [200, 503]
    yield a, b
    # Release the TrainJobs through whichever replica leads, then stop both.
    k8s.kubectl("-n", k8s_namespace, "delete", TRAINJOBS, "--all", "--wait=false",
                check=False)
    try:
        k8s.wait_for(lambda: not all_trainjobs(k8s, k8s_namespace), 90,
                     "the leader to release the test TrainJobs")
    finally:
        for r in (a, b):
            r.stop()
        for obj in all_trainjobs(k8s, k8s_namespace):
            k8s.kubectl("-n", k8s_namespace, "patch", TRAINJOBS, obj["metadata"]["name"],
                        "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        if not os.environ.get("HPCB_KEEP"):
            for r in (a, b):
                cleanup(r.daemon.workdir)


def _complete(k8s: K8sBed, namespace: str) -> int:
    return sum(is_true(_conds(o), "Complete") for o in all_trainjobs(k8s, namespace))


def _conds(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_the_standby_writes_nothing_and_a_killed_leader_mid_100_runs_each_once(
        k8s: K8sBed, k8s_namespace: str, pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    ns = k8s_namespace
    # The standby has no store and no API socket: it cannot write anything.
    assert not (b.daemon.workdir / "state" / "bridge.sqlite").exists()
    assert not b.daemon.socket.exists()
    on_k8s = [trainjob(f"k-{i:03d}", runtime="plain", nodes=1, cpu="100m",
                       command=["true"]) for i in range(80)]
    on_slurm = [trainjob(f"s-{i:03d}", runtime="plain", nodes=1, image=None, backend="slurm",
                         command=["true"]) for i in range(20)]
    docs = [*[d for pair_ in zip(on_k8s[::4], on_slurm, strict=True) for d in pair_],
            *[d for i, d in enumerate(on_k8s) if i % 4]]
    applying = subprocess.Popen(
        [k8s.kubectl_path, "--kubeconfig", k8s.kubeconfig, "-n", ns, "create", "-f", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert applying.stdin is not None
    applying.stdin.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    applying.stdin.close()
    k8s.wait_for(lambda: len(jobsets(k8s, ns)) >= 5, 60, "the first JobSets")
    assert a.proc is not None
    a.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    a.proc.wait(10)
    k8s.wait_for(lambda: b.is_("leader", True), 60, "replica B to take over")
    handover = time.monotonic() - killed
    print(f"\nhandover after SIGKILL of the leader: {handover:.1f}s "
          f"(lease_duration {LEASE['lease_duration']}s)")
    assert applying.wait(120) == 0
    made_before = len(jobsets(k8s, ns))
    assert made_before < 80, "everything was submitted before the kill: kill sooner"

    k8s.wait_for(lambda: _complete(k8s, ns) == 100, 300, "all 100 TrainJobs Complete")
    trainjobs = {o["metadata"]["name"]: o for o in all_trainjobs(k8s, ns)}
    uids = {name: o["metadata"]["uid"] for name, o in trainjobs.items()}
    js_uids = Counter(j["metadata"]["labels"]["hpc-bridge.io/job-uid"] for j in jobsets(k8s, ns))
    assert sorted(js_uids) == sorted(uids[d["metadata"]["name"]] for d in on_k8s)
    assert set(js_uids.values()) == {1}
    wanted = {uids[d["metadata"]["name"]] for d in on_slurm}
    comments = Counter(str(j["comment"]).removeprefix("hpc-bridge:")
                       for j in squeue_bridge_jobs())
    assert {u: comments[u] for u in wanted} == dict.fromkeys(wanted, 1)
    for name, obj in trainjobs.items():
        conds = _conds(obj)
        assert conds["Complete"]["status"] == "True" and "Failed" not in conds, (name, conds)


def test_a_clean_stop_hands_over_at_once_and_a_frozen_leader_exits_when_it_wakes(
        k8s: K8sBed, k8s_namespace: str, pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    ns = k8s_namespace
    apply(k8s, ns, trainjob("before", runtime="plain", nodes=1, cpu="100m", command=["true"]))
    k8s.wait_for(lambda: _complete(k8s, ns) == 1, 120, "the first TrainJob Complete")
    # A rolling update: SIGTERM releases the lease, the standby takes it at its next try.
    assert a.proc is not None
    a.proc.terminate()
    stopped = time.monotonic()
    assert a.proc.wait(30) == 0
    k8s.wait_for(lambda: b.is_("leader", True), 30, "replica B to take over")
    print(f"\nhandover after SIGTERM of the leader: {time.monotonic() - stopped:.1f}s")
    apply(k8s, ns, trainjob("after", runtime="plain", nodes=1, cpu="100m", command=["true"]))
    k8s.wait_for(lambda: _complete(k8s, ns) == 2, 120, "the second TrainJob Complete")
    # The old leader comes back as a standby; then the leader is frozen past its lease.
    a.start()
    k8s.wait_for(lambda: a.is_("standby", False), 60, "replica A to stand by")
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        k8s.wait_for(lambda: a.is_("leader", True), 60, "replica A to take over")
    finally:
        b.proc.send_signal(signal.SIGCONT)
    assert b.proc.wait(15) == 3  # its fence ends it before it writes on a lost lease
    assert "leader election:" in b.daemon.log.read_text()
    apply(k8s, ns, trainjob("last", runtime="plain", nodes=1, cpu="100m", command=["true"]))
    k8s.wait_for(lambda: _complete(k8s, ns) == 3, 120, "the third TrainJob Complete")
    js = Counter(j["metadata"]["name"] for j in jobsets(k8s, ns))
    assert js == {"before": 1, "after": 1, "last": 1}
