"""The measuring side of ``bench/k8s_admit.py``: the objects, kubectl, the watch and
the phases.

* :func:`trainjob` / :func:`jobset` — the bench's TrainJob and the JobSet the bridge
  makes for it (built like ``Engine._request``);
* :class:`Kubectl` — ``kubectl`` calls, one fresh labelled namespace per phase;
* :class:`Watcher` — list-then-watch of one namespace's JobSets and TrainJobs, with
  first-seen times on our clock;
* :class:`Bench` — one phase: N objects in one ``kubectl apply`` (:class:`Batch`) or
  sequential single applies (:class:`Single`), and the TrainJobs' cleanup;
  :func:`cpu_seconds` and :func:`pct` for its numbers.

It knows nothing of the bridge daemon or of Kubeflow Trainer's controller (the main
module starts those) nor of how results are printed (``bench/k8s_admit_report.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench import procstat
from bridge.backend import Owner, SubmitRequest
from bridge.model import GROUP as TRAINER_GROUP
from bridge.model import MANAGED_BY, load_trainjob
from bridge.model import VERSION as TRAINER_VERSION
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import scheduling_of
from k8s_adapter.jobset import GROUP as JOBSET_GROUP
from k8s_adapter.jobset import PLURAL as JOBSET_PLURAL
from k8s_adapter.jobset import VERSION as JOBSET_VERSION
from k8s_adapter.jobset import JobSetOptions, render_jobset
from k8s_adapter.kube import Kube
from tests.integration.k8sbed import TEST_NAMESPACE_LABEL

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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 when it is gone)."""
    try:
        return procstat.cpu_seconds(pid)
    except OSError:
        return 0.0


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
