"""Placement: speed, quality, and agreement with the real slurmctld, in one run.

(a) speed — 10,000 hosts in a 3-level tree (spine -> 20 switches -> 25 leaves -> 20
    hosts), a third of them partly busy; 1,000 pending jobs of mixed sizes placed one
    after the other as one engine pass does (each fitting placement is applied before
    the next job). Total and per-job time for each algorithm and for building the
    topology from an inventory.
(b) quality — a simulated 256-host cluster (16 leaf switches of 16 hosts under one
    spine), a seeded stream of whole-node jobs arriving and leaving (offered load about
    90 %), a FIFO queue with backfill. For each algorithm, in the same run and on the
    same stream: leaf switches per job (and over the minimum possible), the fraction of
    jobs that started the moment they arrived, mean wait. first_fit is the baseline.
(c) slurmctld — on the test bed (needs ``testbed/slurm.sh up`` and root): a few bed
    states made with short blocker jobs, a handful of requests each; what
    ``sbatch --test-only`` says slurmctld would pick against what tree_best_fit
    predicts from the live inventory. Skipped with ``--no-slurm`` or without the bed.

    .venv/bin/python bench/placement.py [--seed 7] [--no-slurm]
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import math
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

# bench/hostlist.py would shadow the python-hostlist package: not the script's folder.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bench.placement_algorithms import block_placement, first_fit, kueue_tas  # noqa: E402
from bridge.backend import Inventory, NodeInfo  # noqa: E402
from bridge.placement import (  # noqa: E402
    Placement,
    PlacementRequest,
    tree_best_fit,
    within_switches,
)
from bridge.topology import Topology, topology_from_inventory  # noqa: E402

Algorithm = Callable[[Topology, PlacementRequest], Placement]
ALGORITHMS: dict[str, Algorithm] = {
    "tree_best_fit": tree_best_fit,
    "block_placement": block_placement,
    "kueue_tas(preferred leaf)": lambda t, r: kueue_tas(t, r, "leaf", "preferred"),
    "first_fit (baseline)": first_fit,
}


def tree_inventory(rng: random.Random, spines: int, switches: int, leaves: int, hosts: int,
                   cpus: int = 64, busy_fraction: float = 0.0) -> Inventory:
    nodes: list[NodeInfo] = []
    tree: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    n = 0
    tops = []
    for s in range(spines):
        mids = []
        for m in range(switches):
            leafs = []
            for leaf in range(leaves):
                names = []
                for _ in range(hosts):
                    n += 1
                    used = rng.choice([8, 16, 32, 64]) if rng.random() < busy_fraction else 0
                    nodes.append(NodeInfo(f"h{n:05d}", "MIXED" if used else "IDLE", cpus,
                                          cpus - used, 256_000, 256_000, gpus=8,
                                          free_gpus=8 if not used else 8 - used // 8))
                    names.append(f"h{n:05d}")
                name = f"leaf{s}-{m}-{leaf}"
                tree[name] = ((), tuple(names))
                leafs.append(name)
            tree[f"sw{s}-{m}"] = (tuple(leafs), ())
            mids.append(f"sw{s}-{m}")
        if spines == 1:
            tree["spine"] = (tuple(mids), ())
        else:
            tree[f"spine{s}"] = (tuple(mids), ())
            tops.append(f"spine{s}")
    return Inventory(nodes=tuple(nodes), switches=tree)


def pct(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(len(samples) * q))]


# --- (a) speed ----------------------------------------------------------------------


def speed(seed: int) -> None:
    rng = random.Random(seed)
    inv = tree_inventory(rng, 1, 20, 25, 20, busy_fraction=0.33)
    start = time.perf_counter()
    topo = topology_from_inventory(inv)
    _ = topo.domains, topo.order, topo.leaf_of
    build = time.perf_counter() - start
    sizes = [1] * 30 + [2] * 20 + [4] * 15 + [8] * 15 + [16] * 10 + [32] * 6 + [64] * 3 + [128]
    jobs = [PlacementRequest(count=rng.choice(sizes), cpu_millis=rng.choice([8, 32, 64]) * 1000,
                             gpus=rng.choice([0, 0, 4, 8])) for _ in range(1000)]
    print(f"(a) speed: {len(inv.nodes)} hosts, {len(topo.leaves)} leaf switches, "
          f"{len(topo.domains)} switches in all, 3 levels; {len(jobs)} pending jobs "
          f"(sizes 1-128 nodes)")
    print(f"    topology_from_inventory: {build * 1e3:.1f} ms")
    for name, algorithm in [*ALGORITHMS.items(),
                            ("within_switches(2)", lambda t, r: within_switches(t, r, 2))]:
        current = topo
        times: list[float] = []
        placed = 0
        total_start = time.perf_counter()
        for job in jobs:
            t0 = time.perf_counter()
            p = algorithm(current, job)
            if p.fits:
                current = p.apply(current, job)
                placed += 1
            times.append(time.perf_counter() - t0)
        total = time.perf_counter() - total_start
        mean = statistics.mean(times) * 1e3
        print(f"    {name:<27} total {total:6.2f} s   per job mean {mean:6.2f}"
              f" ms  p50 {pct(times, .5) * 1e3:6.2f}  p95 {pct(times, .95) * 1e3:6.2f}  max "
              f"{max(times) * 1e3:6.2f} ms   placed {placed}/{len(jobs)}")


# --- (b) quality --------------------------------------------------------------------


@dataclass
class Job:
    id: int
    arrival: float
    size: int
    duration: float


def job_stream(seed: int, n: int, hosts: int, load: float) -> list[Job]:
    rng = random.Random(seed)
    sizes = [1, 1, 2, 2, 4, 4, 8, 8, 12, 16, 24, 32]
    mean_size = statistics.mean(sizes)
    mean_duration = 100.0
    rate = load * hosts / (mean_size * mean_duration)  # arrivals per time unit
    t = 0.0
    jobs = []
    for i in range(n):
        t += rng.expovariate(rate)
        jobs.append(Job(i, t, rng.choice(sizes), rng.expovariate(1 / mean_duration)))
    return jobs


Policy = Callable[[Topology, PlacementRequest, "int | None"], Placement]


def first_fit_leaves(topo: Topology, request: PlacementRequest, limit: int | None) -> Placement:
    """Baseline that knows switches but not best fit: without a limit, :func:`first_fit`;
    with one, the first run of ``limit`` consecutive leaf switches (topology order)
    that holds the job, first free hosts first."""
    if limit is None:
        return first_fit(topo, request)
    leaves = topo.leaves
    for i in range(len(leaves)):
        window = {h for leaf in leaves[i:i + limit] for h in leaf.hosts}
        if sum(request.units_on(topo.hosts[h]) for h in window) >= request.count:
            inside = PlacementRequest(**{**vars(request), "excluded": frozenset(
                h for h in topo.order if h not in window)})
            p = first_fit(topo, inside)
            return Placement("first_fit_leaves", request.count, p.hosts, p.units, p.levels)
    return Placement("first_fit_leaves", request.count, reason="no run of leaves holds it")


POLICIES: dict[str, Policy] = {
    "tree_best_fit": lambda t, r, n: within_switches(t, r, n) if n else tree_best_fit(t, r),
    "block_placement": lambda t, r, n: block_placement(t, r),
    "kueue_tas(preferred leaf)": lambda t, r, n: kueue_tas(t, r, "leaf", "preferred"),
    "first_fit (baseline)": lambda t, r, n: first_fit(t, r),
    "first_fit_leaves (baseline)": first_fit_leaves,
}


def simulate(policy: Policy, jobs: list[Job], inv: Inventory, leaf_size: int,
             compact_wait: float | None) -> dict[str, float]:
    """Event simulation, FIFO queue with backfill (whenever something changes, queued
    jobs start in arrival order as they fit). Whole-node (exclusive) jobs.
    ``compact_wait``: None -- any placement will do; a number -- a job needs its
    minimum number of leaf switches (``--switches=ceil(size/leaf)@compact_wait``) until
    it has waited that long, then any placement."""
    topo = topology_from_inventory(inv)
    events: list[tuple[float, int, int]] = []  # (time, kind, job): 0 end, 1 arrival, 2 timer
    for j in jobs:
        heapq.heappush(events, (j.arrival, 1, j.id))
        if compact_wait is not None:
            heapq.heappush(events, (j.arrival + compact_wait, 2, j.id))
    running: dict[int, Placement] = {}
    queue: list[int] = []
    by_id = {j.id: j for j in jobs}
    leaves: list[int] = []
    over_min: list[float] = []
    waits: list[float] = []
    at_once = relaxed = 0

    def start(j: Job, now: float) -> bool:
        nonlocal topo, relaxed
        r = PlacementRequest(count=j.size, exclusive=True)
        minimum = math.ceil(j.size / leaf_size)
        limit = (minimum if compact_wait is not None and now - j.arrival < compact_wait
                 else None)
        p = policy(topo, r, limit)
        if not p.fits:
            return False
        topo = p.apply(topo, r)
        running[j.id] = p
        used = len(p.leaf_domains)
        relaxed += limit is None and compact_wait is not None and used > minimum
        leaves.append(used)
        over_min.append(used / minimum)
        waits.append(now - j.arrival)
        heapq.heappush(events, (now + j.duration, 0, j.id))
        return True

    while events:
        now, kind, jid = heapq.heappop(events)
        if kind == 1:
            if not queue and start(by_id[jid], now):
                at_once += 1
            else:
                queue.append(jid)
            continue
        if kind == 0:
            p = running.pop(jid)
            topo = topo.with_hosts(
                replace(topo.hosts[h], free_cpu_millis=topo.hosts[h].cpu_millis,
                        free_memory_mb=topo.hosts[h].memory_mb, free_gpus=topo.hosts[h].gpus)
                for h in p.hosts)
        elif jid not in queue:
            continue
        queue = [q for q in queue if not start(by_id[q], now)]
    return {"jobs": len(jobs), "leaves": statistics.mean(leaves),
            "multi": sum(1 for x in leaves if x > 1) / len(leaves),
            "over_min": statistics.mean(over_min), "at_once": at_once / len(jobs),
            "wait": statistics.mean(waits), "relaxed": relaxed / len(jobs)}


def quality(seed: int) -> None:
    hosts, leaf_size = 256, 16
    inv = tree_inventory(random.Random(seed), 1, 1, hosts // leaf_size, leaf_size, cpus=2)
    jobs = job_stream(seed, 3000, hosts, load=0.9)
    print(f"\n(b) quality: {hosts} hosts = {hosts // leaf_size} leaf switches x {leaf_size} "
          f"under one spine; {len(jobs)} whole-node jobs (1-32 nodes, mean duration 100), "
          f"Poisson arrivals, offered load 90 %, FIFO + backfill, seed {seed}")
    header = (f"    {'algorithm':<29} {'leaves/job':>10} {'x minimum':>10} {'>1 leaf':>8} "
              f"{'started at once':>16} {'mean wait':>10} {'relaxed':>8}")
    for title, wait, names in [
        ("b1: any placement will do (a job starts when enough nodes are free, whatever "
         "the algorithm)", None, [n for n in POLICIES if n != "first_fit_leaves (baseline)"]),
        ("b2: compact or wait: each job needs its minimum number of leaf switches "
         "(--switches=ceil(size/16)@50), then any", 50.0,
         ["tree_best_fit", "first_fit_leaves (baseline)"]),
    ]:
        print(f"    {title}\n{header}")
        results = {}
        for name in names:
            r = simulate(POLICIES[name], jobs, inv, leaf_size, wait)
            results[name] = r
            print(f"    {name:<29} {r['leaves']:10.3f} {r['over_min']:10.3f} {r['multi']:8.1%} "
                  f"{r['at_once']:16.1%} {r['wait']:10.1f} {r['relaxed']:8.1%}")
        best = results["tree_best_fit"]
        for base_name in [n for n in names if "baseline" in n]:
            base = results[base_name]
            print(f"    tree_best_fit / {base_name}: leaf switches per job "
                  f"x{best['leaves'] / base['leaves']:.3f}, started at once "
                  f"x{best['at_once'] / base['at_once']:.3f}, mean wait "
                  f"x{best['wait'] / base['wait']:.3f}")


# --- (c) slurmctld ------------------------------------------------------------------

TEST_ONLY = re.compile(r"Job \d+ to start at (\S+) using \d+ processors on nodes (\S+)")
REQUESTS: list[tuple[str, list[str], PlacementRequest, int | None]] = [
    ("-N1", ["-N1"], PlacementRequest(1), None),
    ("-N1 -c2", ["-N1", "-c2"], PlacementRequest(1, cpu_millis=2000), None),
    ("-N2", ["-N2"], PlacementRequest(2), None),
    ("-N2 --exclusive", ["-N2", "--exclusive"], PlacementRequest(2, exclusive=True), None),
    ("-N3", ["-N3"], PlacementRequest(3), None),
    ("-N2 --switches=1", ["-N2", "--switches=1"], PlacementRequest(2), 1),
]
STATES: list[tuple[str, list[list[str]]]] = [
    ("idle", []),
    ("node1 half busy", [["-w", "node1", "-n1", "-c1"]]),
    ("node1 busy", [["-w", "node1", "--exclusive"]]),
    ("node1+node3 busy", [["-w", "node1", "--exclusive"], ["-w", "node3", "--exclusive"]]),
    ("node1 busy, node3 half", [["-w", "node1", "--exclusive"], ["-w", "node3", "-n1", "-c1"]]),
]


def run(argv: list[str], user: str = "alice") -> str:
    done = subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True,
                          timeout=60, cwd="/tmp", check=False)
    return done.stdout + done.stderr


def squeue_states(ids: list[str]) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%T", "-j", ",".join(ids)], capture_output=True,
                         text=True, timeout=30, check=False).stdout
    return out.split()


async def live_topology() -> Topology:
    from slurm_adapter.backend import create
    from tests.integration.bed import read_testbed_env

    bed = read_testbed_env() or {}
    backend = create("bench", {"rest_socket": bed["SLURMRESTD_SOCKET"],
                               "rest_version": bed.get("SLURM_REST_VERSION", "v0.0.38"),
                               "jwt_key": bed["SLURM_JWT_KEY"]})
    await backend.start()
    try:
        return topology_from_inventory(await backend.inventory())
    finally:
        await backend.close()


def slurmctld() -> None:
    from slurm_adapter import hostlist

    print("\n(c) slurmctld (sbatch --test-only) against tree_best_fit on the live inventory; "
          "test bed leaf1=node[1-2], leaf2=node[3-4]")
    agree = total = 0
    for state, blockers in STATES:
        ids = []
        try:
            for b in blockers:
                out = run(["sbatch", "--parsable", "-t", "2", "-J", "bench-blocker", *b,
                           "--wrap", "sleep 100"])
                ids.append(out.strip().split(";")[0])
            deadline = time.monotonic() + 60
            while ids and time.monotonic() < deadline:
                if squeue_states(ids) == ["RUNNING"] * len(ids):
                    break
                time.sleep(0.5)
            else:
                if ids:
                    print(f"    {state}: blockers did not start (bed busy?); skipped")
                    continue
            topo = asyncio.run(live_topology())
            print(f"    state: {state}")
            for label, args, request, switches in REQUESTS:
                out = run(["sbatch", "--test-only", "-t", "1", *args, "--wrap", "true"])
                m = TEST_ONLY.search(out)
                if m is None:
                    print(f"      {label:<18} slurmctld: ? ({out.strip()[:80]})")
                    continue
                when = time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
                slurm_now = when <= time.time() + 5
                slurm = hostlist.compress(hostlist.expand(m.group(2))) if slurm_now else "later"
                p = (within_switches(topo, request, switches) if switches
                     else tree_best_fit(topo, request))
                ours = hostlist.compress(p.hosts) if p.fits else "later"
                same = slurm == ours
                agree += same
                total += 1
                print(f"      {label:<18} slurmctld: {slurm:<12} tree_best_fit: {ours:<12} "
                      f"{'same' if same else 'DIFFERENT'}")
        finally:
            if ids:
                subprocess.run(["scancel", *ids], check=False, timeout=30)
                time.sleep(1)
    if total:
        print(f"    agreement: {agree}/{total} = {agree / total:.0%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-slurm", action="store_true", help="skip (c)")
    args = parser.parse_args()
    speed(args.seed)
    quality(args.seed)
    if not args.no_slurm:
        from tests.integration.bed import read_testbed_env

        if read_testbed_env() is None:
            print("\n(c) skipped: the test bed is not up")
        else:
            slurmctld()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
