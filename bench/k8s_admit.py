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

    .venv/bin/python bench/k8s_admit.py [--jobs 200] [--parallel 4,16,64] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.backend import Owner, SubmitRequest
from bridge.model import GROUP as TRAINER_GROUP
from bridge.model import MANAGED_BY, load_trainjob
from bridge.model import VERSION as TRAINER_VERSION
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import scheduling_of
from k8s_adapter.frontdoor import KNOWN_SETTINGS as DOOR_SETTINGS
from k8s_adapter.jobset import GROUP as JOBSET_GROUP
from k8s_adapter.jobset import PLURAL as JOBSET_PLURAL
from k8s_adapter.jobset import VERSION as JOBSET_VERSION
from k8s_adapter.jobset import JobSetOptions, render_jobset
from k8s_adapter.kube import Kube, KubeSettings
from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir
from tests.integration.k8sbed import K8S_ENV, TEST_NAMESPACE_LABEL, read_k8s_env

REPO = Path(__file__).resolve().parents[1]
#: Builds, starts and stops Kubeflow Trainer's real controller manager (--trainer).
TRAINER_CONTROLLER = REPO / "testbed" / "k8s" / "trainer-controller.sh"
#: The ClusterTrainingRuntimes Trainer's controller reads (the chart's).
RUNTIMES_YAML = REPO / "charts" / "hpc-bridge" / "files" / "runtimes.yaml"
IMAGE = "busybox"
RUNTIME = "torch-distributed"
NODES = 2
#: Fully qualified: a bare ``trainjobs`` may resolve to another group's CRD.
TRAINJOBS = f"trainjobs.{TRAINER_GROUP}"
JOBSETS = f"{JOBSET_PLURAL}.{JOBSET_GROUP}"


# -- the objects ------------------------------------------------------------------------

def trainjob(name: str, namespace: str, managed_by: str | None = MANAGED_BY) -> dict[str, Any]:
    """The bench's TrainJob; ``managed_by=None`` leaves ``spec.managedBy`` unset
    (Trainer's default: its own controller takes it)."""
    spec: dict[str, Any] = {
        "runtimeRef": {"name": RUNTIME},
        "trainer": {"numNodes": NODES, "image": IMAGE, "command": ["true"],
                    "resourcesPerNode": {"requests": {"cpu": "100m", "memory": "64Mi"}}}}
    if managed_by is not None:
        spec = {"managedBy": managed_by, **spec}
    return {
        "apiVersion": f"{TRAINER_GROUP}/{TRAINER_VERSION}", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec,
    }


_CATALOG = RuntimeCatalog()
_NOBODY = Owner(uid=65534, gid=65534, user="nobody")


def jobset(name: str, namespace: str, job_id: int) -> dict[str, Any]:
    """The JobSet the bridge makes for ``trainjob(name, namespace)`` (built like
    ``Engine._request``), without the owner reference (its owner would not exist)."""
    doc = trainjob(name, namespace)
    doc["metadata"]["uid"] = str(uuid.uuid4())
    job = load_trainjob(doc, f"TrainJob {namespace}/{name}")
    request = SubmitRequest(job_uid=doc["metadata"]["uid"], job_id=job_id, job=job,
                            plan=_CATALOG.resolve(job), options=scheduling_of(job),
                            owner=_NOBODY)
    return render_jobset(request, JobSetOptions())


def as_list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


# -- kubectl and the watch --------------------------------------------------------------

@dataclass
class Kubectl:
    binary: str
    kubeconfig: str

    async def run(self, *args: str, input: str | None = None,
                  check: bool = True) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            self.binary, "--kubeconfig", self.kubeconfig, *args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await proc.communicate(input.encode() if input is not None else None)
        rc = proc.returncode or 0
        if check and rc != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {rc}: {err.decode().strip()}")
        return rc, out.decode(), err.decode()

    async def new_namespace(self, prefix: str) -> str:
        name = f"{prefix}{secrets.token_hex(3)}"
        await self.run("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true",
                                                  "hpc-bridge.io/bench": "k8s-admit"}}}))
        for _ in range(150):
            rc, _, _ = await self.run("-n", name, "get", "serviceaccount", "default",
                                      check=False)
            if rc == 0:
                return name
            await asyncio.sleep(0.2)
        raise RuntimeError(f"namespace {name}: no default ServiceAccount after 30 s")

    async def delete_namespace(self, name: str, wait: bool = True) -> None:
        await self.run("delete", "namespace", name, "--ignore-not-found", "--wait=false",
                       check=False)
        if wait:
            await self.run("wait", "--for=delete", f"namespace/{name}", "--timeout=300s",
                           check=False)


class Watcher:
    """List-then-watch of one namespace's JobSets and TrainJobs; first-seen times
    (``time.perf_counter``) by object name."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube = kube
        self.namespace = namespace
        self.jobsets: dict[str, float] = {}
        self.trainjobs: dict[str, float] = {}
        self.statuses: dict[str, float] = {}
        #: First seen with condition Complete=True, by name.
        self.complete: dict[str, float] = {}
        #: TrainJob uid -> name (to read the daemon's log, which names uids).
        self.uids: dict[str, str] = {}
        self._synced = 0
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        custom = self.kube.custom
        self._tasks = [
            asyncio.create_task(self._follow(
                "JobSets", self._jobset, custom.list_namespaced_custom_object,
                JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSET_PLURAL)),
            asyncio.create_task(self._follow(
                "TrainJobs", self._trainjob, custom.list_namespaced_custom_object,
                TRAINER_GROUP, TRAINER_VERSION, self.namespace, "trainjobs")),
        ]
        await self.until(lambda: self._synced == 2, 30, "the watches to start")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _follow(self, what: str, note: Callable[[dict[str, Any], float], None],
                      fn: Any, *args: Any) -> None:
        async for kind, payload in self.kube.list_watch(what, fn, *args):
            now = time.perf_counter()
            if kind == "SYNC":
                for obj in payload:
                    note(obj, now)
                self._synced += 1
            elif kind != "DELETED":
                note(payload, now)
            self._changed.set()

    def _jobset(self, obj: dict[str, Any], now: float) -> None:
        self.jobsets.setdefault(obj["metadata"]["name"], now)

    def _trainjob(self, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        self.trainjobs.setdefault(name, now)
        self.uids[str(obj["metadata"].get("uid"))] = name
        status = obj.get("status") or {}
        if "jobsStatus" in status:  # the controller wrote a status
            self.statuses.setdefault(name, now)
        if any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in status.get("conditions") or ()):
            self.complete.setdefault(name, now)

    async def until(self, predicate: Callable[[], bool], limit: float, what: str) -> None:
        deadline = time.perf_counter() + limit
        while not predicate():
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"timed out after {limit:g} s waiting for {what}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 1.0)):
                    await self._changed.wait()


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
                 namespaces: list[str]) -> BridgeDaemon:
    door: dict[str, Any] = {"kubeconfig": kubeconfig, "backend": "kubernetes", "run_as": "nobody"}
    if "namespaces" in DOOR_SETTINGS:
        # Only the bench's namespaces: never take another test's TrainJobs.
        door["namespaces"] = namespaces
    daemon = BridgeDaemon(
        fresh_daemon_dir("bench-k8s"),
        {"placement": placement, "kubeconfig": kubeconfig},
        engine_settings={"poll_interval": 1.0, "max_parallel_submits": parallel},
        backend_name="kubernetes", backend_kind="kubernetes",
        door_settings=door)
    daemon.start()
    return daemon


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


# -- the phases -------------------------------------------------------------------------

@dataclass
class Batch:
    label: str
    n: int
    apply_s: float
    latencies: list[float]
    total_s: float
    lags: list[float] = field(default_factory=list)
    #: TrainJob seen -> its first status (``jobsStatus``) seen, per job.
    status_lags: list[float] = field(default_factory=list)
    status_s: float | None = None
    notes: str = ""
    #: Wall-clock time (UTC) and our clock at the apply's start.
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    start: float = 0.0
    #: First seen (our clock), by name: JobSets, TrainJobs; TrainJob uid -> name.
    seen: dict[str, float] = field(default_factory=dict)
    trainjobs: dict[str, float] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)
    #: CPU seconds of the controller (bridge daemon or Trainer) and of this process
    #: from the apply until every TrainJob is Complete.
    cpu: tuple[float, float] | None = None
    #: Until every TrainJob is Complete (pods ended in kwok, status written).
    complete_s: float | None = None


@dataclass
class Single:
    label: str
    latencies: list[float]
    apply_s: list[float]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class Bench:
    def __init__(self, kubectl: Kubectl, kube: Kube, n: int, single: int, keep: bool):
        self.kubectl = kubectl
        self.kube = kube
        self.n = n
        self.single = single
        self.keep = keep
        self.namespaces: list[str] = []

    async def namespace(self, prefix: str) -> str:
        ns = await self.kubectl.new_namespace(prefix)
        self.namespaces.append(ns)
        return ns

    async def batch(self, label: str, ns: str, bridge: bool, pid: int | None = None,
                    managed_by: str | None = MANAGED_BY) -> Batch:
        """N objects in one ``kubectl apply``: TrainJobs (``bridge``; ``managed_by``
        for their ``spec.managedBy``) or the JobSets the bridge would make."""
        names = [f"bench-{i:05d}" for i in range(self.n)]
        docs = ([trainjob(name, ns, managed_by) for name in names] if bridge
                else [jobset(name, ns, i + 1) for i, name in enumerate(names)])
        payload = as_list(docs)
        watcher = Watcher(self.kube, ns)
        await watcher.start()
        try:
            started = datetime.now(UTC)
            cpu0 = (cpu_seconds(pid) if pid else 0.0, time.process_time())
            start = time.perf_counter()
            await self.kubectl.run("apply", "-f", "-", input=payload)
            applied = time.perf_counter() - start
            await watcher.until(lambda: len(watcher.jobsets) >= self.n, 600,
                                f"{self.n} JobSets in {ns}")
            result = Batch(label, self.n, applied,
                           [watcher.jobsets[m] - start for m in names],
                           max(watcher.jobsets.values()) - start, started=started,
                           start=start, seen=dict(watcher.jobsets))
            if bridge:
                result.lags = [watcher.jobsets[m] - watcher.trainjobs[m] for m in names]
                await watcher.until(lambda: len(watcher.statuses) >= self.n, 600,
                                    f"a status on {self.n} TrainJobs in {ns}")
                result.status_s = max(watcher.statuses.values()) - start
                result.status_lags = [watcher.statuses[m] - watcher.trainjobs[m]
                                      for m in names]
                result.trainjobs = dict(watcher.trainjobs)
                result.uids = dict(watcher.uids)
                await watcher.until(lambda: len(watcher.complete) >= self.n, 600,
                                    f"{self.n} TrainJobs Complete in {ns}")
                result.complete_s = max(watcher.complete.values()) - start
            if pid:
                result.cpu = (cpu_seconds(pid) - cpu0[0], time.process_time() - cpu0[1])
        finally:
            await watcher.stop()
        return result

    async def singles(self, label: str, ns: str, bridge: bool) -> Single:
        watcher = Watcher(self.kube, ns)
        await watcher.start()
        result = Single(label, [], [])
        try:
            for i in range(self.single):
                name = f"single-{i:04d}"
                doc = trainjob(name, ns) if bridge else jobset(name, ns, i + 1)
                start = time.perf_counter()
                await self.kubectl.run("apply", "-f", "-", input=json.dumps(doc))
                result.apply_s.append(time.perf_counter() - start)
                await watcher.until(lambda n=name: n in watcher.jobsets, 60,  # type: ignore[misc]
                                    f"JobSet {ns}/{name}")
                result.latencies.append(watcher.jobsets[name] - start)
        finally:
            await watcher.stop()
        return result

    async def delete_trainjobs(self, ns: str) -> float:
        """Delete the namespace's TrainJobs while the daemon runs (it cancels the JobSets
        and drops its finalizer); seconds until all are gone."""
        start = time.perf_counter()
        await self.kubectl.run("-n", ns, "delete", TRAINJOBS, "--all", "--wait=false")
        rc, _, _ = await self.kubectl.run("-n", ns, "wait", "--for=delete", TRAINJOBS,
                                          "--all", "--timeout=300s", check=False)
        took = time.perf_counter() - start
        if rc != 0:
            print(f"WARNING: TrainJobs in {ns} not gone after {took:.0f}s; dropping the "
                  "finalizers", file=sys.stderr)
            await self.strip_finalizers(ns)
        return took

    async def strip_finalizers(self, ns: str) -> None:
        """Last resort (the daemon died): drop the bridge's finalizer from what is left."""
        rc, out, _ = await self.kubectl.run("-n", ns, "get", TRAINJOBS, "-o", "name",
                                            check=False)
        for ref in out.split() if rc == 0 else []:
            await self.kubectl.run("-n", ns, "patch", ref, "--type=merge", "-p",
                                   '{"metadata":{"finalizers":null}}', check=False)

    async def drop(self, ns: str, force: bool = False) -> None:
        """Delete the namespace and wait until it is gone (the next phase should not
        share the controllers with its garbage collection); kept under --keep."""
        if force or not self.keep:
            self.namespaces.remove(ns)
            await self.kubectl.delete_namespace(ns)


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
        result.notes = fmt_cpu(result, "Trainer")
        await bench.delete_trainjobs(ns)
    finally:
        stopped = await asyncio.create_subprocess_exec(
            "bash", str(TRAINER_CONTROLLER), "stop", str(workdir))
        await stopped.wait()
        shutil.rmtree(workdir, ignore_errors=True)
        if ns is not None:
            await bench.drop(ns, force=True)
    return result


def fmt_batch(b: Batch) -> str:
    lat = b.latencies
    line = (f"{b.label:<40} apply {b.apply_s:6.2f}s  all seen {b.total_s:6.2f}s  "
            f"{b.n / b.total_s:6.1f} jobs/s  latency p50 {pct(lat, .5):6.2f} "
            f"p95 {pct(lat, .95):6.2f} max {max(lat):6.2f}s")
    if b.lags:
        line += (f"\n{'':<40} lag TrainJob seen -> JobSet seen: p50 {pct(b.lags, .5):5.2f} "
                 f"p95 {pct(b.lags, .95):5.2f} max {max(b.lags):5.2f}s")
    if b.status_s is not None:
        line += f"; all statuses written {b.status_s:6.2f}s"
    if b.status_lags:
        line += (f"\n{'':<40} lag TrainJob seen -> first status seen: p50 "
                 f"{pct(b.status_lags, .5):5.2f} p95 {pct(b.status_lags, .95):5.2f} max "
                 f"{max(b.status_lags):5.2f}s")
    if b.complete_s is not None:
        line += f", all Complete {b.complete_s:6.2f}s"
    if b.notes:
        line += f"\n{'':<40} {b.notes}"
    return line


def fmt_single(s: Single) -> str:
    lat = s.latencies
    return (f"{s.label:<40} kubectl apply {statistics.mean(s.apply_s) * 1e3:5.0f} ms  "
            f"latency p50 {pct(lat, .5) * 1e3:6.0f} p95 {pct(lat, .95) * 1e3:6.0f} "
            f"max {max(lat) * 1e3:6.0f} ms")


def daemon_notes(daemon: BridgeDaemon, b: Batch) -> str:
    parts, warnings = stages(daemon.log, b)
    line = "per job, s: " + ", ".join(
        f"{what} p50 {pct(v, .5):.2f} p95 {pct(v, .95):.2f}" for what, v in
        (("seen->admitted", parts["door"]), ("admitted->JobSet created", parts["engine"]),
         ("created->seen", parts["watch"])) if v)
    if b.cpu is not None:
        line += "\n" + fmt_cpu(b, "daemon") + f"; {warnings} warning lines"
    return line


def fmt_cpu(b: Batch, who: str) -> str:
    assert b.cpu is not None
    wall = b.complete_s or b.status_s or b.total_s
    return (f"{'':<40} CPU s until all Complete: {who} {b.cpu[0]:.2f}, bench "
            f"{b.cpu[1]:.1f} (of {wall:.1f}s wall)")


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
                                  [n for n in (ns, ns1) if n is not None])
            try:
                label = f"bridge: parallel {parallel}, placement {placement}"
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
