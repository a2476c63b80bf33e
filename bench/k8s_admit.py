"""TrainJob → JobSet through the bridge against ``kubectl apply`` of the JobSets.

Needs the Kubernetes test bed (``bash testbed/k8s/k8s.sh up``). Starts its own
``hpc-bridge serve`` (TrainJob front door + Kubernetes back end, temp dir) per
configuration, one fresh namespace per phase, and prints for N jobs:

* baseline: ONE ``kubectl apply -f`` of the N JobSets the bridge would make
  (rendered by ``k8s_adapter.jobset.render_jobset``), timed until a watch has seen
  every JobSet — the fair throughput baseline;
* bridge: ONE ``kubectl apply -f`` of N TrainJobs (``managedBy:
  hpc-bridge.io/controller``, torch-distributed, 2 nodes), timed until the watch has
  seen every JobSet the bridge made, and until every TrainJob has a status condition
  (written back), for each ``max_parallel_submits`` in ``--parallel`` and with
  ``placement = "none"``; then once with ``placement = "constraints"`` (the placement
  cost);
* single jobs, unloaded: ``--single`` sequential ``kubectl apply`` of one JobSet
  (baseline) or one TrainJob (bridge), each waited for until its JobSet is seen;

and the ratios ``bridge / baseline`` (above 1: the bridge is slower). Latencies are
from the start of the kubectl call that sent the object (our clock: the apiserver's
creationTimestamp has second granularity) to the watch seeing the JobSet; "lag" is
TrainJob seen → its JobSet seen, the bridge's own share. Pods are not waited for.
The table ends with where the daemon's time went (from its log timestamps).

This module holds the flow (:func:`run`, :func:`main`) and the controllers it starts:
the bridge daemon (and the reading of its log) and, under ``--trainer``, Kubeflow
Trainer's own controller manager. The objects, kubectl, the watch and the measured
phases are in ``bench/k8s_admit_phases.py``; the printing of a result's lines is in
``bench/k8s_admit_report.py``.

    .venv/bin/python bench/k8s_admit.py [--jobs 200] [--parallel 4,16,64] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.k8s_admit_phases import IMAGE, NODES, RUNTIME, Batch, Bench, Kubectl, Single, pct
from bench.k8s_admit_report import fmt_batch, fmt_cpu, fmt_single
from k8s_adapter.frontdoor import KNOWN_SETTINGS as DOOR_SETTINGS
from k8s_adapter.kube import Kube, KubeSettings
from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir
from tests.integration.k8sbed import K8S_ENV, read_k8s_env

REPO = Path(__file__).resolve().parents[1]
#: Builds, starts and stops Kubeflow Trainer's real controller manager (--trainer).
TRAINER_CONTROLLER = REPO / "testbed" / "k8s" / "trainer-controller.sh"
#: The ClusterTrainingRuntimes Trainer's controller reads (the chart's).
RUNTIMES_YAML = REPO / "charts" / "hpc-bridge" / "files" / "runtimes.yaml"


# -- the daemon -------------------------------------------------------------------------

@dataclass
class BridgeDaemon(Daemon):
    """``tests.integration.bed.Daemon`` plus the TrainJob front door section."""

    door_settings: dict[str, Any] = field(default_factory=dict)

    def write_config(self) -> None:
        super().write_config()
        lines = ["", "[frontdoors.kubernetes]", 'kind = "kubernetes"']
        lines += [f"{k} = {json.dumps(v)}" for k, v in self.door_settings.items()]
        with self.config.open("a") as fh:
            fh.write("\n".join(lines) + "\n")


def start_daemon(kubeconfig: str, parallel: int, placement: str,
                 namespaces: list[str], event_loop: str = "uvloop") -> BridgeDaemon:
    door: dict[str, Any] = {"kubeconfig": kubeconfig, "backend": "kubernetes", "run_as": "nobody"}
    if "namespaces" in DOOR_SETTINGS:
        # Only the bench's namespaces: never take another test's TrainJobs.
        door["namespaces"] = namespaces
    daemon = BridgeDaemon(
        fresh_daemon_dir("bench-k8s"),
        {"placement": placement, "kubeconfig": kubeconfig},
        engine_settings={"poll_interval": 1.0, "max_parallel_submits": parallel},
        backend_name="kubernetes", backend_kind="kubernetes",
        daemon_settings={"event_loop": event_loop}, door_settings=door)
    daemon.start()
    return daemon


def stages(log: Path, b: Batch) -> tuple[dict[str, list[float]], int]:
    """Per job, from the daemon's JSON log (UTC timestamps, mapped onto our clock):
    TrainJob seen -> ``job admitted`` (the front door) -> ``job submitted`` (the engine:
    JobSet created) -> JobSet seen; and the number of warning/error lines."""
    admitted: dict[str, float] = {}
    submitted: dict[str, float] = {}
    warnings = 0
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
            at = datetime.fromisoformat(str(rec["timestamp"]).replace("Z", "+00:00"))
        except (ValueError, KeyError, TypeError):
            # The front door logs through stdlib logging: plain text, no time stamp.
            warnings += any(w in line for w in ("will retry", "failed", "refused"))
            continue
        t = b.start + (at - b.started).total_seconds()
        warnings += rec.get("level") in ("warning", "error")
        if rec.get("event") == "job admitted" and rec.get("uid") in b.uids:
            admitted[b.uids[rec["uid"]]] = t
        elif rec.get("event") == "job submitted" and rec.get("backend_id"):
            submitted[str(rec["backend_id"]).rpartition("/")[2]] = t
    out: dict[str, list[float]] = {"door": [], "engine": [], "watch": []}
    for name, seen in b.seen.items():
        if name in admitted and name in submitted and name in b.trainjobs:
            out["door"].append(admitted[name] - b.trainjobs[name])
            out["engine"].append(submitted[name] - admitted[name])
            out["watch"].append(seen - submitted[name])
    return out, warnings


def daemon_notes(daemon: BridgeDaemon, b: Batch) -> str:
    parts, warnings = stages(daemon.log, b)
    line = "per job, s: " + ", ".join(
        f"{what} p50 {pct(v, .5):.2f} p95 {pct(v, .95):.2f}" for what, v in
        (("seen->admitted", parts["door"]), ("admitted->JobSet created", parts["engine"]),
         ("created->seen", parts["watch"])) if v)
    if b.cpu is not None:
        line += "\n" + fmt_cpu(b, "daemon") + f"; {warnings} warning lines"
    return line


def other_daemons() -> list[str]:
    """Other ``hpc-bridge serve`` processes, and whether their TrainJob front door
    watches all namespaces (then it takes the bench's TrainJobs too)."""
    out = subprocess.run(["pgrep", "-af", "hpc-bridge serve"], capture_output=True,
                         text=True, check=False).stdout
    warnings = []
    for line in out.splitlines():
        argv = line.split()
        config = next((argv[i + 1] for i, a in enumerate(argv[:-1])
                       if a in ("-c", "--config")), None)
        what = "its config is unreadable: it may watch all namespaces and take the " \
               "bench's TrainJobs"
        with contextlib.suppress(OSError, ValueError):
            doors = tomllib.loads(Path(str(config)).read_text()).get("frontdoors") or {}
            k8s = [d for d in doors.values() if d.get("kind") == "kubernetes"]
            if not k8s:
                what = "no TrainJob front door (only API server load)"
            elif any(not d.get("namespaces") for d in k8s):
                what = "its TrainJob front door watches ALL namespaces: it takes the " \
                       "bench's TrainJobs too"
            else:
                what = "its front door watches other namespaces only (API server load)"
        warnings.append(f"another bridge daemon runs, {what}: {line}")
    return warnings


async def trainer_batch(bench: Bench, kubectl: Kubectl) -> Batch:
    """The same N TrainJobs, ``spec.managedBy`` unset, run by Kubeflow Trainer's own
    controller manager (testbed/k8s/trainer-controller.sh) instead of the bridge."""
    await kubectl.run("apply", "-f", str(RUNTIMES_YAML))
    workdir = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    started = await asyncio.create_subprocess_exec(
        "bash", str(TRAINER_CONTROLLER), "start", str(workdir), stdout=subprocess.PIPE)
    out, _ = await started.communicate()
    if started.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"{TRAINER_CONTROLLER} start failed (its output is above)")
    pid = int(out.split()[-1])
    ns: str | None = None
    try:
        ns = await bench.namespace("bench-trainer-")
        result = await bench.batch("Trainer's controller manager", ns, bridge=True,
                                   pid=pid, managed_by=None)
        result.notes = fmt_cpu(result, "Trainer").lstrip()  # fmt_batch indents it
        await bench.delete_trainjobs(ns)
    finally:
        stopped = await asyncio.create_subprocess_exec(
            "bash", str(TRAINER_CONTROLLER), "stop", str(workdir))
        await stopped.wait()
        shutil.rmtree(workdir, ignore_errors=True)
        if ns is not None:
            await bench.drop(ns, force=True)
    return result


async def run(args: argparse.Namespace, env: dict[str, str]) -> int:
    kubeconfig = args.kubeconfig
    kubectl = Kubectl(str(Path(env["K8S_BIN_DIR"]) / "kubectl"), kubeconfig)
    kube = Kube(KubeSettings(kubeconfig=kubeconfig, request_timeout=30, watch_timeout=600))
    await kube.connect()
    bench = Bench(kubectl, kube, args.jobs, args.single, args.keep)
    load = os.getloadavg()
    parallels = [int(p) for p in args.parallel.split(",") if p.strip()]
    batches: dict[str, Batch] = {}
    singles: dict[str, Single] = {}
    cleanups: list[str] = []
    try:
        ns = await bench.namespace("bench-base-")
        batches["base"] = await bench.batch("baseline: kubectl apply N JobSets", ns,
                                            bridge=False)
        await bench.drop(ns)
        if args.single:
            ns = await bench.namespace("bench-base1-")
            singles["base"] = await bench.singles("baseline: 1 JobSet, kubectl apply", ns,
                                                  bridge=False)
            await bench.drop(ns)
        modes = [(p, "none") for p in parallels]
        if not args.no_placement:
            modes.append((16 if 16 in parallels else parallels[0], "constraints"))
        for index, (parallel, placement) in enumerate(modes):
            # A later daemon (empty store) would adopt an earlier phase's TrainJobs, so
            # --keep keeps only the last phase's.
            keep = args.keep and index == len(modes) - 1
            key = f"p{parallel}-{placement}"
            ns = await bench.namespace(f"bench-{parallel}{placement[0]}-")
            ns1 = (await bench.namespace("bench-one-")
                   if args.single and "bridge" not in singles and placement == "none" else None)
            daemon = start_daemon(kubeconfig, parallel, placement,
                                  [n for n in (ns, ns1) if n is not None], args.event_loop)
            try:
                label = f"bridge: parallel {parallel}, placement {placement}, {args.event_loop}"
                assert daemon.proc is not None
                result = await bench.batch(label, ns, bridge=True, pid=daemon.proc.pid)
                result.notes = daemon_notes(daemon, result)
                batches[key] = result
                if ns1 is not None:
                    singles["bridge"] = await bench.singles(
                        f"bridge: 1 TrainJob, parallel {parallel}", ns1, bridge=True)
            finally:
                # TrainJobs carry the bridge's finalizer: delete them while it runs.
                for name in (ns, ns1):
                    if name is None or keep:
                        continue
                    gone = await bench.delete_trainjobs(name)
                    if name == ns:
                        cleanups.append(f"{key}: {args.jobs} TrainJobs deleted (JobSets "
                                        f"cancelled, finalizers dropped) in {gone:.1f}s")
                daemon.stop()
                if keep:
                    print(f"daemon dir kept: {daemon.workdir}", file=sys.stderr)
                else:
                    cleanup(daemon.workdir)
            for name in (ns, ns1):
                if name is not None and not keep:
                    await bench.drop(name, force=True)
        if args.trainer:
            batches["trainer"] = await trainer_batch(bench, kubectl)
    finally:
        if not args.keep:
            for ns in list(bench.namespaces):
                await bench.strip_finalizers(ns)
                await kubectl.delete_namespace(ns, wait=False)
        await kube.close()

    base = batches["base"]
    print(f"{args.jobs} jobs (TrainJob {RUNTIME}, {NODES} nodes, {IMAGE}); Kubernetes "
          f"{env.get('K8S_VERSION', '?')}, JobSet {env.get('JOBSET_VERSION', '?')}, kwok "
          f"{len(env.get('K8S_NODES', '').split(','))} nodes; engine poll_interval 1.0; "
          f"{os.cpu_count()} CPUs for everything, load {load[0]:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at end")
    for b in batches.values():
        print(fmt_batch(b))
    for s in singles.values():
        print(fmt_single(s))
    print("ratios (bridge / baseline; > 1 is slower):")
    for key, b in batches.items():
        if key == "base":
            continue
        print(f"  {key:<18} all seen {b.total_s / base.total_s:6.2f}  throughput "
              f"{base.total_s / b.total_s:6.2f}x of baseline  p50 "
              f"{pct(b.latencies, .5) / pct(base.latencies, .5):6.2f}  p95 "
              f"{pct(b.latencies, .95) / pct(base.latencies, .95):6.2f}")
    if "base" in singles and "bridge" in singles:
        sb, sr = singles["base"], singles["bridge"]
        print(f"  {'single job':<18} latency p50 "
              f"{pct(sr.latencies, .5) / pct(sb.latencies, .5):6.2f}  p95 "
              f"{pct(sr.latencies, .95) / pct(sb.latencies, .95):6.2f}")
    if "trainer" in batches:
        trainer = batches["trainer"]
        assert trainer.cpu is not None
        print(f"controller CPU s for {args.jobs} TrainJobs until all Complete (bridge / "
              f"Trainer {env.get('TRAINER_VERSION', '?')}; > 1: the bridge uses more):")
        for key, b in batches.items():
            if key not in ("base", "trainer") and b.cpu is not None:
                print(f"  {key:<18} {b.cpu[0]:6.2f} / {trainer.cpu[0]:6.2f} = "
                      f"{b.cpu[0] / trainer.cpu[0]:5.2f}")
    for line in cleanups:
        print(f"cleanup {line}")
    return 0


def main() -> int:
    env = read_k8s_env()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kubeconfig", default=(env or {}).get("KUBECONFIG"),
                        help=f"default: KUBECONFIG of {K8S_ENV}")
    parser.add_argument("--parallel", default="4,16,64",
                        help="engine.max_parallel_submits values, comma-separated")
    parser.add_argument("--single", type=int, default=20,
                        help="sequential one-job applies per side (0: skip)")
    parser.add_argument("--no-placement", action="store_true",
                        help='skip the placement = "constraints" run')
    parser.add_argument("--trainer", action="store_true",
                        help="also run the TrainJobs with Kubeflow Trainer's own controller "
                             "(built from its Go module by testbed/k8s/trainer-controller.sh)"
                             " and compare controller CPU")
    parser.add_argument("--event-loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="the daemon's [daemon] event_loop (bridge/eventloop.py)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the namespaces and objects (of the bridge: the last "
                             "daemon's only) and that daemon's temp dir")
    args = parser.parse_args()
    if env is None or not args.kubeconfig:
        print("the Kubernetes test bed is not up: bash testbed/k8s/k8s.sh up", file=sys.stderr)
        return 2
    for warning in other_daemons():
        print(f"WARNING: {warning}", file=sys.stderr)
    if not re.fullmatch(r"\d+(,\d+)*", args.parallel.replace(" ", "")):
        parser.error("--parallel: comma-separated integers")
    return asyncio.run(run(args, env))


if __name__ == "__main__":
    sys.exit(main())
