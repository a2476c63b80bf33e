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

and the ratios ``bridge / baseline`` (below 1: the bridge is faster); then
``--parallel-jobs`` (200) submissions from ``--clients`` (16) threads at once, each a
loop of ``sbatch --wrap true`` as alice, then of ``tbatch --wrap true`` as alice, then of
``POST /v1/jobs`` (one API client per thread), each until every job is in Slurm
(sbatch: when the last returns; the bridge: when the daemon has none left Pending,
looked at every 20 ms), as jobs per second and their ratios (above 1: the bridge
is faster).

    .venv/bin/python bench/submit.py [--jobs 50] [--clients 16] [--parallel-jobs 200]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fairness import compile_bytecode
from bench.procstat import cpu_seconds
from bench.scale import pid_of, slurm_config
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
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--parallel-jobs", type=int, default=200)
    args = parser.parse_args()
    n = args.jobs
    compile_bytecode()  # the t* commands start as installed ones do
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
        wait_handed_over(daemon, "all jobs to reach Slurm")
        handover = time.perf_counter() - start
        squeue = timed(lambda: subprocess.run(["squeue", "--json"], check=True,
                                              capture_output=True), 10)
        listing = timed(lambda: daemon.api("GET", "/v1/jobs",
                                           params={"states": "all"}).raise_for_status(), 10)
        total, clients = args.parallel_jobs, args.clients
        assert daemon.proc is not None
        meter = CpuMeter({"daemon": daemon.proc.pid,
                          "slurmctld": int(Path(slurm_config("SlurmctldPidFile")).read_text()),
                          "slurmrestd": pid_of(env["SLURMRESTD_SOCKET"], "slurmrestd")})
        meter.start()
        par_sbatch = at_once(sbatch, total, clients)
        cpu_sbatch = meter.take(total)
        start = time.perf_counter()
        at_once(tbatch, total, clients)
        wait_handed_over(daemon, "the parallel tbatch jobs to reach Slurm")
        par_tbatch = time.perf_counter() - start
        # One client per thread (an httpx client is not shared), made before the clock.
        pool = [httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)),
                             base_url="http://bridge", timeout=60) for _ in range(clients)]
        local = threading.local()
        turns = iter(range(clients))
        lock = threading.Lock()

        def post() -> None:
            if not hasattr(local, "client"):
                with lock:
                    local.client = pool[next(turns)]
            local.client.post("/v1/jobs", json=WRAP_JOB).raise_for_status()

        meter.start()
        start = time.perf_counter()
        at_once(post, total, clients)
        wait_handed_over(daemon, "the parallel API jobs to reach Slurm")
        par_api = time.perf_counter() - start
        cpu_api = meter.take(total)
        for client in pool:
            client.close()
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
    print(f"{total} jobs from {clients} clients at once, until all are in Slurm:")
    print(f"  {clients} sbatch loops      {total / par_sbatch:7.1f} jobs/s ({par_sbatch:.2f} s)")
    print(f"  {clients} tbatch loops      {total / par_tbatch:7.1f} jobs/s ({par_tbatch:.2f} s)")
    print(f"  {clients} API clients      {total / par_api:7.1f} jobs/s ({par_api:.2f} s)")
    print(f"  tbatch / sbatch (jobs/s)  {par_sbatch / par_tbatch:6.2f}  (each tbatch is a "
          f"Python process: its start bounds it)")
    print(f"  API / sbatch (jobs/s)     {par_sbatch / par_api:6.2f}  (the daemon's side; "
          f"goal >= 1.0)")
    print(f"CPU ms per job in those runs ({os.cpu_count()} CPUs; 'clients' is this process "
          f"and its children: sbatch as alice, or the API clients):")
    for name in cpu_api:
        print(f"  {name:<12} sbatch loops {cpu_sbatch[name]:6.2f}   API clients "
              f"{cpu_api[name]:6.2f}")
    print(f"  {'all':<12} sbatch loops {sum(cpu_sbatch.values()):6.2f}   API clients "
          f"{sum(cpu_api.values()):6.2f}")
    return 0


#: Seconds between two looks at the daemon while its jobs reach Slurm: each look asks
#: for one job still Pending (a few hundred microseconds of the daemon's time), so the
#: wait ends within this much of the last hand-over.
POLL = 0.02


class CpuMeter:
    """CPU seconds of named processes (with the commands they ran: the daemon's
    ``scontrol`` and ``sbatch``), and of this process with its children, between
    :meth:`start` and :meth:`take`."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid is not None}
        self._at: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = {name: cpu_seconds(pid, children=True) for name, pid in self.pids.items()}
        out["clients"] = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
        return out

    def start(self) -> None:
        self._at = self._now()

    def take(self, jobs: int) -> dict[str, float]:
        """Milliseconds of CPU per job of each since :meth:`start`."""
        now = self._now()
        return {name: (now[name] - self._at[name]) * 1e3 / jobs for name in now}


def at_once(fn: Callable[[], None], total: int, clients: int) -> float:
    """``total`` calls of ``fn`` from ``clients`` threads; the seconds until all returned."""
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: fn(), range(total)))
    return time.perf_counter() - start


def wait_handed_over(daemon: Daemon, what: str) -> None:
    """Until no job of the daemon is Pending: every job it admitted has reached Slurm
    (the runs before each measure have left none Pending); a failed job fails the
    bench (a refusal is no hand-over)."""
    def none_pending() -> bool:
        page = daemon.api("GET", "/v1/jobs", params={"states": "Pending", "limit": "1"})
        return not page.json()["items"]

    wait_for(none_pending, 600, what, POLL)
    failed = daemon.api("GET", "/v1/jobs", params={"states": "Failed", "limit": "1"})
    if failed.json()["items"]:
        raise SystemExit(f"a job failed instead of reaching Slurm: {failed.json()['items'][0]}")


if __name__ == "__main__":
    sys.exit(main())
