"""Site scale: the bridge's figures beside their anchors, measured in the same run.

Needs the Slurm test bed (``bash testbed/slurm.sh up``) and root (it runs commands as
alice and cancels its own jobs). One daemon (the slurmrestd path of the bed, per-user
``[limits]`` off: one user fills it), its state in a fresh temporary directory:

1. **fill**: N tracked jobs, POSTed concurrently (``--threads``) by a process running
   as alice: a share (``--slurm-share``, kept ``--headroom`` under Slurm's
   MaxJobCount) are real Slurm jobs held back with ``--begin=now+1day``, the rest
   suspended TrainJobs that stay in the bridge; first about 100, then up to N.
   Reported: POSTs accepted per second and jobs handed to Slurm per second, beside
   ``sbatch`` run one after another.
2. **measures**, each beside its anchor: ``tqueue`` against ``squeue`` (whole
   processes as alice, median / best of ``--repeat``) at about 100 jobs and at N;
   ``tbatch --wrap true`` against the same interpreter's ``python -c pass`` and
   against ``sbatch --wrap true``; ``python -c pass`` against ``squeue`` at about 100
   jobs (the floor of any Python command there); the daemon's CPU seconds per minute while idle
   (``--idle`` seconds, from /proc/PID/stat) against slurmctld's in the same window,
   with an empty store and at N, and that of the commands it ran meanwhile (``squeue``
   at each poll); VmRSS at N against the empty store; restart (SIGTERM,
   start, until the socket answers ``GET /v1/jobs?limit=1``) at N against the empty
   store; status latency (``scancel`` as root of ``--cancels`` pending jobs, until the
   daemon's store shows them finished) p50/p95 against the poll interval.

Prints ``measure | bridge | anchor | ratio`` (``--json``: the same as JSON). Every Slurm
job it makes carries the job name ``hpcb-scale-<pid>``; at the end (also on failure)
it stops the daemon, cancels those jobs by id and removes its directories.

    .venv/bin/python bench/scale.py [--jobs 10000] [--json] [--whole-listings]

``--whole-listings`` runs the Slurm back end with ``changes_from_squeue = false`` (a
whole ``GET /jobs`` whenever slurmctld's table changed): the baseline of the default,
which reads only the jobs whose ``squeue`` line changed.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.fairness import compile_bytecode, rss_mb
from bench.procstat import cpu_seconds
from tests.integration.bed import (
    BIN,
    Daemon,
    cleanup,
    fresh_daemon_dir,
    read_testbed_env,
    shared_dir,
    wait_for,
)

NAME = f"hpcb-scale-{os.getpid()}"
BEGIN = "now+1day"
LIMITS_OFF = ("[limits]\nmax_active_jobs = 0\nsubmit_rate = 0\nrequest_rate = 0\n"
              "max_concurrent_requests = 0\n")
FINAL = ("Succeeded", "Failed", "Cancelled")


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the fill, run as alice -----------------------------------------------------------

def trainjob(name: str, suspended: bool) -> dict[str, Any]:
    """A ``true`` batch job that Slurm holds for a day, or a suspended TrainJob."""
    scheduling = {"output": "/dev/null", "job_name": name, "begin": BEGIN}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"annotations": {"hpc-bridge.io/batch-script": "#!/bin/sh\ntrue\n",
                                         "hpc-bridge.io/scheduling": json.dumps(scheduling)}},
            "spec": {"runtimeRef": {"name": "plain"}, "trainer": {"numNodes": 1},
                     "suspend": suspended}}


def fill(socket: str, name: str, slurm: int, suspended: int, threads: int) -> dict[str, Any]:
    """POST ``slurm + suspended`` jobs from ``threads`` threads (one client each),
    waiting out 429/503; the seconds it took and how many answers were retried."""
    kinds = [False] * slurm + [True] * suspended
    random.Random(0).shuffle(kinds)
    local = threading.local()
    retried = [0] * len(kinds)

    def post(index: int) -> None:
        client: httpx.Client | None = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(transport=httpx.HTTPTransport(uds=socket),
                                                 base_url="http://bridge", timeout=120)
        for _ in range(50):
            resp = client.post("/v1/jobs", json=trainjob(name, kinds[index]))
            if resp.status_code == 201:
                return
            if resp.status_code not in (429, 503):
                raise RuntimeError(f"POST /v1/jobs: {resp.status_code} {resp.text[:300]}")
            retried[index] += 1
            time.sleep(float(resp.headers.get("Retry-After", "1")))
        raise RuntimeError("POST /v1/jobs: refused 50 times")

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(post, range(len(kinds))))
    return {"seconds": time.perf_counter() - start, "retried": sum(retried)}


# -- helpers --------------------------------------------------------------------------

def alice_env(daemon: Daemon) -> dict[str, str]:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HPC_BRIDGE_SOCKET": str(daemon.socket),
           "HOME": "/home/alice", "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):  # a worktree's code, not main's editable install
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def as_alice(argv: list[str], env: dict[str, str], cwd: Path,
             timeout: float = 600) -> tuple[float, str]:
    """Run ``argv`` as alice (setuid, no login); its wall seconds and its stdout."""
    pw = pwd.getpwnam("alice")
    start = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=cwd, user=pw.pw_uid, group=pw.pw_gid,
                         extra_groups=[], capture_output=True, text=True, check=False,
                         timeout=timeout)
    took = time.perf_counter() - start
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} as alice: {res.returncode} {res.stderr}")
    return took, res.stdout


def interleaved(commands: dict[str, list[str]], repeat: int, env: dict[str, str],
                cwd: Path) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Each command ``repeat`` times as alice, taking turns (so that the machine's load
    falls on all alike): wall seconds per run, and output lines of each one's last run."""
    times: dict[str, list[float]] = {k: [] for k in commands}
    lines: dict[str, int] = {}
    for _ in range(repeat):
        for key, argv in commands.items():
            took, out = as_alice(argv, env, cwd)
            times[key].append(took)
            lines[key] = len(out.splitlines())
    return times, lines


def slurm_config(key: str) -> str:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         check=True).stdout
    found = re.search(rf"^{key}\s*=\s*(\S+)", out, re.M)
    if found is None:
        raise RuntimeError(f"scontrol show config has no {key}")
    return found.group(1)


def slurm_job_count() -> int:
    """Jobs slurmctld holds now, finished ones (kept MinJobAge) included."""
    out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], capture_output=True,
                         text=True, check=True).stdout
    return len(out.split())


def pid_of(cmdline_part: str, exe: str) -> int | None:
    """The process running ``exe`` whose command line contains ``cmdline_part``."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(exe.encode()) and cmdline_part.encode() in b" ".join(argv):
            return int(proc.name)
    return None


def cpu_per_minute(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU seconds per minute of each process over the same ``seconds``; for the
    ``daemon``, also ``commands``: those of the commands it ran and reaped meanwhile
    (``squeue`` at each Slurm poll, ``sbatch``)."""
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    daemon = pids.get("daemon")
    both = cpu_seconds(daemon, children=True) if daemon is not None else 0.0
    start = time.perf_counter()
    time.sleep(seconds)
    took = time.perf_counter() - start
    out = {k: (cpu_seconds(p) - before[k]) * 60 / took for k, p in pids.items()}
    if daemon is not None:
        out["commands"] = (cpu_seconds(daemon, children=True) - both) * 60 / took \
            - out["daemon"]
    return out


def restart(daemon: Daemon) -> float:
    """SIGTERM the daemon, start it again: seconds until it answers GET /v1/jobs."""
    start = time.perf_counter()
    daemon.stop()
    with daemon.log.open("ab") as logf:
        daemon.proc = subprocess.Popen(
            [str(BIN / "hpc-bridge"), "serve", "--config", str(daemon.config)], stdout=logf,
            stderr=logf, stdin=subprocess.DEVNULL, env={**os.environ, **daemon.extra_env})

    def answers() -> bool:
        assert daemon.proc is not None
        if daemon.proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {daemon.proc.returncode}; see {daemon.log}")
        try:
            return daemon.api("GET", "/v1/jobs", params={"limit": "1"}).status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    wait_for(answers, 300, "the restarted daemon to answer", 0.01)
    took = time.perf_counter() - start
    wait_for(lambda: daemon.api("GET", "/v1/healthz").json().get("ready"), 300,
             "the restarted daemon to be ready", 0.05)
    daemon.socket.parent.chmod(0o755)
    return took


def wait_handed_over(daemon: Daemon, timeout: float) -> None:
    """Until no job waits to reach Slurm (the suspended ones stay Suspended)."""
    def none_pending() -> bool:
        return not daemon.api("GET", "/v1/jobs", params={"states": "Pending", "limit": "1"}
                              ).json()["items"]
    wait_for(none_pending, timeout, "every job to reach Slurm", 0.5)


def status_latency(daemon: Daemon, count: int, poll: float) -> list[float]:
    """scancel (as root) ``count`` of the bench's pending Slurm jobs one at a time, at
    random points of the poll cycle: seconds from scancel's return to a final state."""
    items = daemon.api("GET", "/v1/jobs", params={"states": "Submitted",
                                                   "limit": str(count)}).json()["items"]
    out = []
    for job in items:
        time.sleep(random.uniform(0, poll))
        subprocess.run(["scancel", job["backendId"]], check=True, timeout=60)
        start = time.perf_counter()
        job_id: int = job["id"]
        wait_for(lambda: daemon.job(job_id)["state"] in FINAL, 120,  # noqa: B023
                 f"job {job_id} to be seen cancelled", 0.01)
        out.append(time.perf_counter() - start)
    return out


def cancel_bench_jobs() -> int:
    """scancel, by id, every unfinished Slurm job carrying the bench's job name."""
    out = subprocess.run(["squeue", "-h", "-n", NAME, "-o", "%i"], capture_output=True,
                         text=True, check=False).stdout
    ids = out.split()
    for i in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[i:i + 500]], check=False, timeout=600)
    return len(ids)


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


# -- the report -----------------------------------------------------------------------

@dataclass
class Row:
    """One measure: the bridge's figure, its anchor's (None: none), in ``unit``; for
    timed processes the median, with the best run beside it."""

    measure: str
    unit: str
    bridge: float
    anchor: float | None
    bridge_best: float | None = None
    anchor_best: float | None = None

    @property
    def ratio(self) -> float | None:
        return self.bridge / self.anchor if self.anchor else None


def timed_row(measure: str, bridge: list[float], anchor: list[float]) -> Row:
    """Process wall times (seconds) as a row in ms: median, best."""
    return Row(measure, "ms, median (best)", statistics.median(bridge) * 1e3,
               statistics.median(anchor) * 1e3, min(bridge) * 1e3, min(anchor) * 1e3)


def cell(value: float | None, best: float | None) -> str:
    def fmt(x: float) -> str:
        return f"{x:.1f}" if x < 1000 else f"{x:,.0f}"

    if value is None:
        return "-"
    return f"{fmt(value)} ({fmt(best)})" if best is not None else fmt(value)


def print_table(rows: list[Row], context: dict[str, Any]) -> None:
    print(f"hpc-bridge at site scale: {context['jobs']:,} tracked jobs ({context['slurm_jobs']:,}"
          f" held in Slurm, {context['suspended_jobs']:,} suspended in the bridge); "
          f"{context['cpus']} CPUs; slurmctld held {context['slurm_jobs_at_n']:,} jobs at N; "
          f"poll interval {context['poll_interval']} s; whole run "
          f"{context['run_seconds']:.0f} s")
    width = max(len(f"{r.measure} [{r.unit}]") for r in rows)
    print(f"{'measure':<{width}} | {'bridge':>17} | {'anchor':>17} | ratio")
    print(f"{'-' * width}-|-{'-' * 17}-|-{'-' * 17}-|------")
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        print(f"{f'{r.measure} [{r.unit}]':<{width}} | {cell(r.bridge, r.bridge_best):>17} | "
              f"{cell(r.anchor, r.anchor_best):>17} | {ratio}")


# -- the run --------------------------------------------------------------------------

def run_fill(daemon: Daemon, outdir: Path, slurm: int, suspended: int,
             threads: int) -> tuple[float, float]:
    """Fill as alice; (POSTs accepted per second, jobs handed to Slurm per second)."""
    log(f"filling {slurm + suspended} jobs ({slurm} for Slurm, {suspended} suspended)")
    env = {**alice_env(daemon), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    start = time.perf_counter()
    _took, out = as_alice([str(BIN / "python"), str(Path(__file__).resolve()), "--fill",
                           str(daemon.socket), NAME, str(slurm), str(suspended),
                           str(threads)], env, outdir, timeout=7200)
    result = json.loads(out)
    wait_handed_over(daemon, max(600.0, slurm / 2))
    handover = time.perf_counter() - start
    log(f"filled: POSTs {result['seconds']:.1f} s ({result['retried']} retried), all in "
        f"Slurm after {handover:.1f} s")
    return (slurm + suspended) / result["seconds"], slurm / handover if slurm else 0.0


def measure(args: argparse.Namespace, bed: dict[str, str], daemon: Daemon, outdir: Path,
            rows: list[Row], context: dict[str, Any]) -> None:
    assert daemon.proc is not None
    n = args.jobs
    max_jobs = int(slurm_config("MaxJobCount"))
    held = slurm_job_count()
    slurm_n = max(0, min(round(n * args.slurm_share), max_jobs - held - args.headroom))
    if slurm_n < round(n * args.slurm_share):
        log(f"Slurm holds {held} of MaxJobCount {max_jobs}: only {slurm_n} Slurm jobs")
    first = min(100, n)
    first_slurm = round(first * slurm_n / n) if n else 0
    context.update(slurm_jobs=slurm_n, suspended_jobs=n - slurm_n, max_job_count=max_jobs,
                   slurm_jobs_at_start=held)
    poll = args.poll_interval
    ctld = int(Path(slurm_config("SlurmctldPidFile")).read_text())
    others = {"slurmctld": ctld}
    restd = pid_of(bed["SLURMRESTD_SOCKET"], "slurmrestd")
    if restd is not None:
        others["slurmrestd"] = restd
    env, tq, sq = alice_env(daemon), [str(BIN / "tqueue")], ["squeue"]
    time.sleep(2 * poll)

    # -- empty store --
    rss_empty = rss_mb(daemon.proc.pid)
    log("idle CPU, empty store")
    idle_empty = cpu_per_minute({"daemon": daemon.proc.pid, **others}, args.idle)
    restart_empty = [restart(daemon) for _ in range(args.restarts)]
    log(f"restart with an empty store: {[round(x, 2) for x in restart_empty]} s")

    # -- about 100 --
    fill_small = run_fill(daemon, outdir, first_slurm, first - first_slurm, args.threads)
    time.sleep(poll)
    # python -c pass in the same turns: the floor of any Python command beside squeue.
    t_small, l_small = interleaved({"tqueue": tq, "squeue": sq,
                                    "python": [str(BIN / "python"), "-c", "pass"]},
                                   args.repeat, env, outdir)

    # -- N --
    accepted, handed = fill_small
    if n > first:
        accepted, handed = run_fill(daemon, outdir, slurm_n - first_slurm,
                                    n - first - (slurm_n - first_slurm), args.threads)
    context.update(slurm_jobs_at_n=slurm_job_count())
    time.sleep(2 * poll)
    log("tqueue and squeue at N")
    t_big, l_big = interleaved({"tqueue": tq, "squeue": sq}, args.repeat, env, outdir)
    log("tbatch, python -c pass, sbatch")
    held_args = ["--parsable", "-J", NAME, "-o", "/dev/null", f"--begin={BEGIN}", "--wrap",
                 "true"]
    t_sub, _ = interleaved({"tbatch": [str(BIN / "tbatch"), *held_args],
                            "python": [str(BIN / "python"), "-c", "pass"],
                            "sbatch": ["sbatch", *held_args]}, args.repeat, env, outdir)
    time.sleep(2 * poll)
    log("idle CPU at N")
    idle_n = cpu_per_minute({"daemon": daemon.proc.pid, **others}, args.idle)
    rss_n = rss_mb(daemon.proc.pid)
    restart_n = [restart(daemon) for _ in range(args.restarts)]
    log(f"restart at N: {[round(x, 2) for x in restart_n]} s")
    time.sleep(3 * poll)
    rss_restarted = rss_mb(daemon.proc.pid)
    log("status latency")
    latency = status_latency(daemon, args.cancels, poll)

    m = statistics.median
    sbatch_rate = 1 / m(t_sub["sbatch"])
    rows += [
        timed_row(f"tqueue | squeue, ~100 jobs ({l_small['tqueue']} | {l_small['squeue']} "
                  "lines)", t_small["tqueue"], t_small["squeue"]),
        timed_row(f"tqueue | squeue, N ({l_big['tqueue']} | {l_big['squeue']} lines)",
                  t_big["tqueue"], t_big["squeue"]),
        timed_row("tbatch --wrap true | python -c pass", t_sub["tbatch"], t_sub["python"]),
        # The floor of any Python command beside squeue: tqueue cannot start faster.
        timed_row("python -c pass | squeue, ~100 jobs", t_small["python"], t_small["squeue"]),
        timed_row("tbatch --wrap true | sbatch --wrap true", t_sub["tbatch"], t_sub["sbatch"]),
        Row(f"fill ~100, {args.threads} threads: POSTs accepted | sbatch one by one",
            "jobs/s", fill_small[0], sbatch_rate),
        Row(f"fill N, {args.threads} threads: POSTs accepted | sbatch one by one", "jobs/s",
            accepted, sbatch_rate),
        Row("fill N: handed to Slurm | sbatch one by one", "jobs/s", handed, sbatch_rate),
        Row("idle CPU, empty store: daemon | slurmctld", "CPU s/min", idle_empty["daemon"],
            idle_empty["slurmctld"]),
        Row("idle CPU, N: daemon | slurmctld", "CPU s/min", idle_n["daemon"],
            idle_n["slurmctld"]),
        Row("idle CPU, N: the daemon's commands (squeue) | slurmctld", "CPU s/min",
            idle_n["commands"], idle_n["slurmctld"]),
    ]
    if "slurmrestd" in idle_n:
        rows.append(Row("idle CPU, N: slurmrestd (all bed daemons) | slurmctld", "CPU s/min",
                        idle_n["slurmrestd"], idle_n["slurmctld"]))
    rows += [
        Row("daemon RSS: N | empty store", "MB", rss_n, rss_empty),
        Row("daemon RSS: N after restart | empty store", "MB", rss_restarted, rss_empty),
        Row("restart to answering: N | empty store", "s, median (best)", m(restart_n),
            m(restart_empty), min(restart_n), min(restart_empty)),
        Row(f"status latency p50 ({len(latency)} scancels) | poll interval", "s",
            pct(latency, 50), poll),
        Row(f"status latency p95 ({len(latency)} scancels) | poll interval", "s",
            pct(latency, 95), poll),
    ]
    context["samples"] = {"tqueue_100": t_small, "tqueue_n": t_big, "submit": t_sub,
                          "restart_empty": restart_empty, "restart_n": restart_n,
                          "status_latency": latency, "idle_empty": idle_empty,
                          "idle_n": idle_n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10000, help="tracked jobs (N)")
    parser.add_argument("--slurm-share", type=float, default=0.6,
                        help="share of N held in Slurm (the rest: suspended TrainJobs)")
    parser.add_argument("--headroom", type=int, default=2500,
                        help="Slurm job slots left free for others under MaxJobCount")
    parser.add_argument("--threads", type=int, default=4, help="threads POSTing the fill")
    parser.add_argument("--repeat", type=int, default=7, help="runs of each timed command")
    parser.add_argument("--restarts", type=int, default=3, help="restarts at each size")
    parser.add_argument("--idle", type=float, default=30.0, help="idle CPU window, seconds")
    parser.add_argument("--cancels", type=int, default=20, help="scancels timed")
    parser.add_argument("--poll-interval", type=float, default=2.0,
                        help="[engine] poll_interval (the shipped default: 2.0)")
    parser.add_argument("--whole-listings", action="store_true",
                        help="the Slurm back end reads a whole listing at each poll "
                             "(changes_from_squeue = false): the baseline of its default")
    parser.add_argument("--json", action="store_true", help="print JSON instead")
    parser.add_argument("--keep", action="store_true", help="keep the daemon's directory")
    parser.add_argument("--fill", nargs=5, help=argparse.SUPPRESS)  # alice's side
    args = parser.parse_args()
    if args.fill:
        socket, name, slurm, suspended, threads = args.fill
        print(json.dumps(fill(socket, name, int(slurm), int(suspended), int(threads))))
        return 0
    compile_bytecode()  # the t* commands start as installed ones do
    env = read_testbed_env()
    if env is None or os.geteuid() != 0:
        print("needs root and the test bed: bash testbed/slurm.sh up", file=sys.stderr)
        return 2
    started = time.perf_counter()
    outdir = shared_dir("bench-scale-")
    workdir = fresh_daemon_dir("scale-bench")
    daemon = Daemon(workdir, {"rest_socket": env["SLURMRESTD_SOCKET"],
                              "rest_version": env.get("SLURM_REST_VERSION", "v0.0.38"),
                              "jwt_key": env["SLURM_JWT_KEY"],
                              "changes_from_squeue": not args.whole_listings},
                    engine_settings={"poll_interval": args.poll_interval},
                    extra_toml=LIMITS_OFF)
    rows: list[Row] = []
    context: dict[str, Any] = {"jobs": args.jobs, "cpus": os.cpu_count(),
                               "poll_interval": args.poll_interval, "job_name": NAME,
                               "changes_from_squeue": not args.whole_listings,
                               "date": time.strftime("%Y-%m-%d")}
    try:
        daemon.start()
        measure(args, env, daemon, outdir, rows, context)
    finally:
        daemon.stop()
        cancelled = cancel_bench_jobs()
        log(f"cancelled {cancelled} Slurm jobs named {NAME}")
        if args.keep:
            log(f"kept {workdir} (daemon.log)")
        else:
            cleanup(workdir)
        cleanup(outdir)
    context["run_seconds"] = time.perf_counter() - started
    if args.json:
        print(json.dumps({"context": context,
                          "rows": [{**asdict(r), "ratio": r.ratio} for r in rows]}, indent=1))
    else:
        print_table(rows, context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
