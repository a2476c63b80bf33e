"""TrainJob → all its pods bound: the shared pool (``k8s-on-slurm``) against the plain
JobSet path, and Slurm's own start latency, in the same run.

Needs the Slurm and Kubernetes test beds (``bash testbed/slurm.sh up``, ``bash
testbed/k8s/k8s.sh up``: the pool nodes node1..4). Starts one ``hpc-bridge serve``
(TrainJob front door; back ends ``kubernetes`` and ``pool``, as the integration tests
do) in a fresh namespace and, ``--jobs`` times each, one after the other:

* plain: ``kubectl apply`` of a 2-node TrainJob on the ``kubernetes`` back end, until
  both training pods are bound to a node (``spec.nodeName``);
* pool: the same TrainJob routed to ``pool``, until both pods are bound (the holder
  allocated by Slurm, seen by the bridge, the JobSet pinned and unsuspended);
  meanwhile, squeue is polled for the holder: from its first appearance to RUNNING is
  Slurm's own share (one scheduling step);
* slurm: ``sbatch -N2 --wrap true`` as alice, until ``squeue`` shows it RUNNING or
  done: Slurm's start of a plain job, for comparison.

It prints p50/p95 of each, and what the pool adds beyond Slurm's start of the holder
(pool - plain - holder wait), against the goal: at most one second on top of one Slurm
scheduling step. Every job is cleaned up.

    .venv/bin/python bench/k8s_on_slurm.py [--jobs 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.bed import read_testbed_env
from tests.integration.k8s_bridge import TRAINJOBS, apply, k8s_daemon, pods, trainjob
from tests.integration.k8sbed import K8sBed, read_k8s_env
from tests.integration.test_k8s_on_slurm import POOL, pool_settings
from tests.integration.test_k8s_trainjobs import release

POLL = 0.05


def until(predicate: Callable[[], object], timeout: float = 180) -> float:
    """Seconds until ``predicate`` holds (polled every POLL s)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError("timed out")
        time.sleep(POLL)
    return time.monotonic() - start


def bound(k8s: K8sBed, ns: str, name: str) -> bool:
    found = pods(k8s, ns, f"jobset.sigs.k8s.io/jobset-name={name},"
                          "jobset.sigs.k8s.io/replicatedjob-name=node")
    return len(found) == 2 and all(p["spec"].get("nodeName") for p in found)


def holder_state(uid: str) -> str | None:
    """The state of TrainJob ``uid``'s holder as squeue shows it (None: not there yet)."""
    out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%T %k"],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        state, _, comment = line.partition(" ")
        if comment.split(" ")[0] == f"hpc-bridge:{uid}":
            return state
    return None


def slurm_start() -> float:
    """sbatch → RUNNING (or already done) as squeue shows it, for a 2-node job."""
    start = time.monotonic()
    job = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-N2",
                          "-o", "/dev/null", "--chdir=/tmp", "--wrap", "true"],
                         capture_output=True, text=True, check=True, timeout=30
                         ).stdout.strip().split(";")[0]

    def started() -> bool:
        state = subprocess.run(["squeue", "-h", "--states=all", "-j", job, "-o", "%T"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return state not in ("", "PENDING", "CONFIGURING")

    until(started)
    return time.monotonic() - start


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return f"p50 {statistics.median(xs):6.2f} s   p95 {p95:6.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10)
    args = parser.parse_args()
    slurm_env, k8s_env = read_testbed_env(), read_k8s_env()
    if slurm_env is None or k8s_env is None:
        sys.exit("needs the Slurm and Kubernetes test beds up")
    k8s = K8sBed.from_env(k8s_env)
    ns = k8s.new_namespace("hpcb-bench-")
    daemon = k8s_daemon(k8s, ns, slurm=slurm_env, allowed_backends=["slurm", POOL],
                        extra=pool_settings(k8s, slurm_env))
    daemon.start()
    times: dict[str, list[float]] = {"plain": [], "pool": [], "holder": [], "slurm": []}
    try:
        for i in range(args.jobs):
            for path in ("plain", "pool"):
                name = f"{path}-{i:03d}"
                doc = trainjob(name, nodes=2, backend=POOL if path == "pool" else None)
                start = time.monotonic()
                apply(k8s, ns, doc)
                if path == "pool":  # the holder's own wait in Slurm, as squeue shows it
                    uid = k8s.get_json("-n", ns, TRAINJOBS, name)["metadata"]["uid"]
                    queued = start + until(lambda u=uid: holder_state(u) is not None)
                    until(lambda u=uid: holder_state(u) not in (None, "PENDING"))
                    times["holder"].append(time.monotonic() - queued)
                until(lambda n=name: bound(k8s, ns, n))
                times[path].append(time.monotonic() - start)
                k8s.kubectl("-n", ns, "delete", "trainjobs.trainer.kubeflow.org", name,
                            "--wait=false")
            times["slurm"].append(slurm_start())
    finally:
        release(k8s, ns, daemon)
        k8s.delete_namespace(ns)
    print(f"TrainJob → both pods bound, {args.jobs} jobs each, one at a time")
    for path, label in (("plain", "plain JobSet path (kubernetes)"),
                        ("pool", "shared pool (k8s-on-slurm)"),
                        ("holder", "  of which: holder queued → RUNNING"),
                        ("slurm", "raw sbatch -N2 → RUNNING (squeue)")):
        print(f"  {label:36} {stats(times[path])}")
    added = [pool - plain - held for pool, plain, held
             in zip(times["pool"], times["plain"], times["holder"], strict=True)]
    print(f"  added by the bridge beyond Slurm's own start of the holder (pool - plain - "
          f"holder wait): {stats(added)}; goal ≤ 1 s: "
          f"{'met' if statistics.median(added) <= 1.0 else 'NOT met'} (p50)")
    print(json.dumps({k: [round(x, 3) for x in v] for k, v in times.items()}))


if __name__ == "__main__":
    main()
