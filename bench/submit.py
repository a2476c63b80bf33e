"""Submission through the bridge against raw Slurm, measured in the same run.

Needs the test bed (``bash testbed/slurm.sh up``) and root (it submits as alice).
Prints, for N jobs each:

* ``sbatch --wrap true`` run N times as alice (the baseline a user knows),
* ``tbatch --wrap true`` run N times as alice (the same user experience, through the
  daemon: admitted and durable when tbatch returns),
* N ``POST /v1/jobs`` from one process (the API without CLI start-up),
* the time until the daemon has handed all N to Slurm (state Submitted or later),
* one status poll: ``squeue --json`` (what the daemon runs per interval, for ALL jobs)
  against ``GET /v1/jobs`` from the daemon's store,

and the ratios ``bridge / baseline`` (below 1: the bridge is faster).

    .venv/bin/python bench/submit.py [--jobs 50]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.bed import (
    Daemon,
    cleanup,
    fresh_daemon_dir,
    read_testbed_env,
    shared_dir,
    wait_for,
)

WRAP_JOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"annotations": {"hpc-bridge.io/batch-script": "#!/bin/sh\ntrue\n",
                                 "hpc-bridge.io/scheduling": '{"output": "/dev/null"}'}},
    "spec": {"runtimeRef": {"name": "plain"}, "trainer": {"numNodes": 1}},
}


def timed(fn: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def summary(name: str, samples: list[float]) -> str:
    return (f"{name:<34} total {sum(samples):7.3f}s  per job {statistics.mean(samples) * 1e3:7.1f}"
            f" ms  p95 {sorted(samples)[int(len(samples) * 0.95) - 1] * 1e3:7.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    n = args.jobs
    env = read_testbed_env()
    if env is None:
        print("the test bed is not up: bash testbed/slurm.sh up", file=sys.stderr)
        return 2
    outdir = shared_dir("bench-submit-")
    workdir = fresh_daemon_dir("bench")
    daemon = Daemon(workdir, {"rest_socket": env["SLURMRESTD_SOCKET"],
                              "rest_version": env.get("SLURM_REST_VERSION", "v0.0.38"),
                              "jwt_key": env["SLURM_JWT_KEY"]})
    daemon.start()
    try:
        def sbatch() -> None:
            subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-o",
                            "/dev/null", "--wrap", "true"], cwd=outdir, check=True,
                           capture_output=True)

        def tbatch() -> None:
            res = daemon.cli("alice", "tbatch", "--parsable", "-o", "/dev/null", "--wrap",
                             "true", cwd=outdir)
            assert res.returncode == 0, res.stderr

        def api() -> None:
            daemon.api("POST", "/v1/jobs", json=WRAP_JOB).raise_for_status()

        base = timed(sbatch, n)
        cli = timed(tbatch, n)
        start = time.perf_counter()
        rest = timed(api, n)

        def all_handed_over() -> bool:
            items = daemon.api("GET", "/v1/jobs", params={"states": "all"}).json()["items"]
            return sum(1 for j in items if j["backendId"]) >= 2 * n

        wait_for(all_handed_over, 300, "all jobs to reach Slurm", 0.05)
        handover = time.perf_counter() - start
        squeue = timed(lambda: subprocess.run(["squeue", "--json"], check=True,
                                              capture_output=True), 10)
        listing = timed(lambda: daemon.api("GET", "/v1/jobs",
                                           params={"states": "all"}).raise_for_status(), 10)
    finally:
        daemon.stop()
        cleanup(workdir)
        cleanup(outdir)

    print(f"{n} jobs each, as alice, Slurm 22.05 test bed (slurmrestd v0.0.38 path)")
    print(summary("baseline: sbatch --wrap", base))
    print(summary("tbatch --wrap (admitted, durable)", cli))
    print(summary("API POST /v1/jobs (one client)", rest))
    print(f"{'API POSTs -> all in Slurm':<34} total {handover:7.3f}s  "
          f"throughput {n / handover:7.1f} jobs/s")
    print(summary("baseline: squeue --json (1 poll)", squeue))
    print(summary("GET /v1/jobs (daemon store)", listing))
    print("ratios (bridge / baseline; < 1 is faster):")
    print(f"  tbatch / sbatch           {statistics.mean(cli) / statistics.mean(base):6.2f}")
    print(f"  API POST / sbatch         {statistics.mean(rest) / statistics.mean(base):6.2f}")
    print(f"  API to Slurm / sbatch     {handover / sum(base):6.2f}  (whole batch)")
    print(f"  GET /v1/jobs / squeue     "
          f"{statistics.mean(listing) / statistics.mean(squeue):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
