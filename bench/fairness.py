"""Fair share under load: alice's ``tqueue``/``tbatch`` while bob floods the daemon.

Needs the Slurm test bed (``bash testbed/slurm.sh up``) and root (it runs commands as
alice and the flood as bob). One real daemon (the slurmrestd path, default
``[limits]``), two phases in the same run:

1. **baseline**: alice runs ``tqueue`` and ``tbatch --wrap true`` (whole processes, as
   she would type them), one after the other, nothing else going on;
2. **flood**: the same, while bob (a process running as bob, ignoring every
   ``Retry-After``) keeps up, in waves until alice is done: 2,000 concurrent
   ``GET /v1/jobs``, 500 submissions (suspended TrainJobs, so that Slurm runs none of
   them) and 40 submissions with 8 MB batch scripts.

It prints p50/p99 of alice's commands and the daemon's peak RSS per phase, bob's
answers by status, and the goals (tqueue p99 <= 200 ms, tbatch p99 <= 500 ms, RSS <= 150
MB). Alice's ``tbatch`` jobs run ``true`` on the bed.

    .venv/bin/python bench/fairness.py [--tqueue 100] [--tbatch 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import resource
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procstat import cpu_seconds
from tests.integration.bed import (
    BIN,
    Daemon,
    cleanup,
    fresh_daemon_dir,
    read_testbed_env,
    shared_dir,
)

BIG_BYTES = 8 * 1024 * 1024
#: What bob sends per wave (``--flood-mix`` changes it: lists,submits,big).
LISTS, SUBMITS, BIG = (int(x) for x in os.environ.get("FAIR_FLOOD_MIX", "2000,500,40").split(","))


def suspended_job(name: str, script: str = "#!/bin/sh\ntrue\n") -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "annotations": {
                "hpc-bridge.io/batch-script": script,
                "hpc-bridge.io/scheduling": '{"output": "/dev/null"}'}},
            "spec": {"runtimeRef": {"name": "plain"}, "trainer": {"numNodes": 1},
                     "suspend": True}}


async def flood(socket_path: str, stop_file: str) -> dict[str, int]:
    """bob's side: waves of lists, submissions and huge scripts until ``stop_file``
    exists. Returns the answers by kind and status."""
    import aiohttp

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    counts: Counter[str] = Counter()
    big = json.dumps(suspended_job("big", "#!/bin/sh\n" + "#" * BIG_BYTES))
    connector = aiohttp.UnixConnector(path=socket_path, limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=120)
    submitted = 0
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(kind: str, method: str, path: str, data: str | None = None) -> None:
            try:
                async with session.request(method, f"http://bridge{path}", data=data,
                                           headers={"Content-Type": "application/json"}
                                           ) as response:
                    await response.read()
                    counts[f"{kind} {response.status}"] += 1
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                counts[f"{kind} {type(exc).__name__}"] += 1

        wave = 0
        while not os.path.exists(stop_file):
            tasks = [one("list", "GET", "/v1/jobs") for _ in range(LISTS)]
            if submitted < SUBMITS:
                tasks += [one("submit", "POST", "/v1/jobs",
                              json.dumps(suspended_job(f"bob-{wave}-{i}")))
                          for i in range(SUBMITS - submitted)]
            tasks += [one("8MB script", "POST", "/v1/jobs", big) for _ in range(BIG)]
            await asyncio.gather(*tasks)
            submitted = counts["submit 201"]
            wave += 1
    counts["waves"] = wave
    return dict(counts)


def compile_bytecode() -> None:
    """Write the bytecode of the project's packages, as an install does (pip compiles a
    wheel's modules; the editable development venv does not, and with
    ``PYTHONDONTWRITEBYTECODE`` set, or as a user who cannot write ``__pycache__``,
    every t* command would compile each module it imports at every start: about 6 ms
    of ``tbatch``'s). Timed commands then start as an installed tbatch does."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("bridge", "slurm_adapter", "flux_adapter", "k8s_adapter", "mpi_launch"):
        compileall.compile_dir(root / package, quiet=1)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """Samples a process's RSS every 20 ms while running; :attr:`peak` in MB."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> PeakRss:
        self.peak = rss_mb(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def api_probe(daemon: Daemon, n: int, submit: bool = False) -> list[float]:
    """``GET /v1/jobs`` (or a ``POST`` of a suspended job) from this process, no command
    start-up: the daemon's own latency, a diagnostic beside alice's whole commands."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        if submit:
            daemon.api("POST", "/v1/jobs", json=suspended_job(
                f"probe-{time.monotonic_ns()}-{i}")).raise_for_status()
        else:
            daemon.api("GET", "/v1/jobs").raise_for_status()
        out.append(time.perf_counter() - start)
    return out


def as_alice(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Run a command as alice (setuid, no login shell); its wall time in seconds."""
    pw = pwd.getpwnam("alice")
    start = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=cwd, user=pw.pw_uid, group=pw.pw_gid,
                         extra_groups=[], capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if res.returncode != 0:
        raise RuntimeError(f"{argv[0]} as alice failed: {res.stderr}")
    return took


def alice_phase(daemon: Daemon, outdir: Path, n_queue: int, n_batch: int,
                probe: list[float], probe_submit: list[float],
                ) -> tuple[list[float], list[float]]:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HPC_BRIDGE_SOCKET": str(daemon.socket),
           "HOME": "/home/alice", "LANG": "C.UTF-8"}
    queue = [as_alice([str(BIN / "tqueue")], env, outdir) for _ in range(n_queue)]
    probe.extend(api_probe(daemon, n_queue))
    probe_submit.extend(api_probe(daemon, n_batch, submit=True))
    batch = [as_alice([str(BIN / "tbatch"), "-o", "/dev/null", "--wrap", "true"], env, outdir)
             for _ in range(n_batch)]
    return queue, batch


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))] * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tqueue", type=int, default=100)
    parser.add_argument("--tbatch", type=int, default=40)
    parser.add_argument("--keep", action="store_true",
                        help="keep the daemon's directory (its log) and say where")
    parser.add_argument("--flood", nargs=2, metavar=("SOCKET", "STOP_FILE"),
                        help=argparse.SUPPRESS)  # bob's side, run by the bench itself
    args = parser.parse_args()
    if args.flood:
        print(json.dumps(asyncio.run(flood(*args.flood))))
        return 0
    compile_bytecode()  # the t* commands start as installed ones do
    env = read_testbed_env()
    if env is None:
        print("the test bed is not up: bash testbed/slurm.sh up", file=sys.stderr)
        return 2
    outdir = shared_dir("bench-fair-")
    workdir = fresh_daemon_dir("fair-bench")
    daemon = Daemon(workdir, {"rest_socket": env["SLURMRESTD_SOCKET"],
                              "rest_version": env.get("SLURM_REST_VERSION", "v0.0.38"),
                              "jwt_key": env["SLURM_JWT_KEY"]})
    daemon.start()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    stop_file = outdir / "stop"
    try:
        idle_rss = rss_mb(pid)
        base_p: list[float] = []
        flood_p: list[float] = []
        base_s: list[float] = []
        flood_s: list[float] = []
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        with PeakRss(pid) as base_rss:
            base_q, base_b = alice_phase(daemon, outdir, args.tqueue, args.tbatch, base_p,
                                         base_s)
        cpu1, t1 = cpu_seconds(pid), time.perf_counter()
        bob_pw = pwd.getpwnam("bob")
        bob = subprocess.Popen(
            [str(BIN / "python"), str(Path(__file__).resolve()), "--flood",
             str(daemon.socket), str(stop_file)], user=bob_pw.pw_uid, group=bob_pw.pw_gid,
            extra_groups=[], env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": "/tmp"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with PeakRss(pid) as flood_rss:
            time.sleep(2.0)  # let the first wave land before alice starts
            flood_q, flood_b = alice_phase(daemon, outdir, args.tqueue, args.tbatch,
                                           flood_p, flood_s)
            cpu2, t2 = cpu_seconds(pid), time.perf_counter()
            bob_cpu = cpu_seconds(bob.pid)
            stop_file.touch()
            out, err = bob.communicate(timeout=600)
        if bob.returncode != 0:
            raise RuntimeError(f"the flood failed: {err[-2000:]}")
        counts = json.loads(out)
        bob_jobs = len(daemon.api("GET", "/v1/jobs", params={
            "user": "bob", "limit": "5000"}).json()["items"])
        log_hits = sum("per-user limits hit" in line for line in
                       daemon.log.read_text().splitlines())
    finally:
        stop_file.touch()
        daemon.stop()
        if args.keep:
            print(f"kept {workdir} (daemon.log)", file=sys.stderr)
        else:
            cleanup(workdir)
        cleanup(outdir)

    print(f"alice: {args.tqueue} x tqueue, {args.tbatch} x tbatch --wrap true (whole "
          f"processes); bob: waves of {LISTS} lists + {SUBMITS} submissions + {BIG} x "
          f"{BIG_BYTES // 2**20} MB scripts; {os.cpu_count()} CPUs, Slurm 22.05 bed")
    print(f"{'':<22}{'p50':>9}{'p99':>9}   {'flood p50':>9}{'p99':>9}   p99 ratio  goal")
    for name, base, fl, goal in (("tqueue (ms)", base_q, flood_q, 200),
                                 ("tbatch (ms)", base_b, flood_b, 500),
                                 ("GET /v1/jobs, API (ms)", base_p, flood_p, 0),
                                 ("POST /v1/jobs, API (ms)", base_s, flood_s, 0)):
        ok = ("" if not goal else f"<= {goal} ok" if pct(fl, 99) <= goal
              else f"<= {goal} MISSED")
        print(f"{name:<22}{pct(base, 50):9.1f}{pct(base, 99):9.1f}   {pct(fl, 50):9.1f}"
              f"{pct(fl, 99):9.1f}   {pct(fl, 99) / pct(base, 99):9.2f}  {ok}")
    ok = "ok" if flood_rss.peak <= 150 else "MISSED"
    print(f"{'daemon RSS peak (MB)':<22}{base_rss.peak:18.1f}   {flood_rss.peak:18.1f}"
          f"   {flood_rss.peak / base_rss.peak:9.2f}  <= 150 {ok}  (idle at start "
          f"{idle_rss:.1f})")
    print(f"daemon CPU (% of a core): baseline {100 * (cpu1 - cpu0) / (t1 - t0):.0f}, "
          f"flood {100 * (cpu2 - cpu1) / (t2 - t1):.0f}; bob's flood client "
          f"{100 * bob_cpu / (t2 - t1):.0f}; load average {os.getloadavg()[0]:.1f}")
    print(f"bob's answers: {json.dumps(counts, sort_keys=True)}")
    print(f"bob's jobs admitted: {bob_jobs}; 'per-user limits hit' log lines: {log_hits}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
