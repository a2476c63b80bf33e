"""The training runtimes of a cluster: its ``ClusterTrainingRuntime`` and
``TrainingRuntime`` objects, followed (list, then watch) into the daemon's runtime
catalog, where they come before the admin's files and the built-in runtimes
(bridge/runtimes.py).

Contract (:class:`ClusterRuntimes`):

* :meth:`ClusterRuntimes.probe` asks once which of the two kinds the cluster serves: a
  kind whose resource is not there (404: Trainer's runtime CRDs not installed) is left
  out, logged; an apiserver that cannot be reached or refuses the listing (403: the
  bridge's RBAC lacks ``list``/``watch`` on them, charts/hpc-bridge/files/rbac.yaml) is
  :class:`bridge.backend.BackendUnavailable`, and the door waits, as for its other
  checks at start.
* :meth:`ClusterRuntimes.run` follows the kinds served and hands the whole set to
  ``apply`` after each burst of changes (once per pass of the event loop). :attr:`synced`
  is set once every listing has been read once: the door takes no TrainJob before, so
  that a TrainJob naming a cluster's runtime is never refused for want of it.
* ClusterTrainingRuntimes are read cluster-wide (only cluster admins write them);
  TrainingRuntimes in the door's namespaces (all when it has none). The catalog uses a
  namespaced one only for a TrainJob of that namespace that came from a cluster.
* An object that is not a runtime the bridge can read (a malformed spec, a ``spec``
  over :data:`MAX_RUNTIME_BYTES`, one past :data:`MAX_RUNTIMES_PER_SCOPE` in its
  namespace or among the cluster-scoped ones) is logged and left out, as is any
  earlier version of it: a TrainJob naming it is refused with
  "unknown runtime" rather than run with what the object no longer says.
* Jobs already admitted keep the runtime they were admitted with (their stored shape).
* :meth:`ClusterRuntimes.fetch` reads one runtime at once: the door asks before it
  refuses a TrainJob for an unknown runtime, since a runtime created just before the
  TrainJob (``kubectl apply -f runtime.yaml -f trainjob.yaml``) may not have come
  through the watch yet.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import structlog

from bridge.backend import BackendRejected
from bridge.model import (
    GROUP,
    VERSION,
    ClusterTrainingRuntime,
    TrainingRuntime,
    TrainJob,
    ValidationError,
)
from bridge.model import load_document as load_runtime
from k8s_adapter.kube import Kube, is_status

__all__ = ["KINDS", "ClusterRuntimes", "parse_runtime"]

log = structlog.get_logger("k8s_adapter.frontdoor")

Runtime = ClusterTrainingRuntime | TrainingRuntime
#: kind -> plural.
KINDS = {"ClusterTrainingRuntime": "clustertrainingruntimes",
         "TrainingRuntime": "trainingruntimes"}
_META = ("name", "namespace", "labels", "annotations")
#: A runtime's ``spec`` at most (bytes of JSON), and runtimes per namespace (or
#: cluster-scoped) at most: whoever may write runtimes cannot make the daemon hold
#: or rebuild an unbounded catalog.
MAX_RUNTIME_BYTES = 256 * 1024
MAX_RUNTIMES_PER_SCOPE = 200
#: Deletions remembered (for :meth:`ClusterRuntimes.fetch`), at most.
MAX_TOMBSTONES = 10_000


def _version(obj: dict[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd's revision; -1 if it is not one)."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or -1)
    except ValueError:
        return -1


def parse_runtime(kind: str, obj: dict[str, Any]) -> Runtime:
    """The runtime an object of ``kind`` says (only its name, namespace, labels and
    annotations kept of its metadata); :class:`ValidationError` naming the field that
    does not read."""
    meta = obj.get("metadata") or {}
    doc = {**obj, "kind": kind, "metadata": {k: meta[k] for k in _META if k in meta}}
    runtime = load_runtime(doc)
    assert isinstance(runtime, ClusterTrainingRuntime | TrainingRuntime)
    if not runtime.metadata.name:
        raise ValidationError([("metadata.name", "required")])
    return runtime


class ClusterRuntimes:
    """See the module docstring."""

    def __init__(self, kube: Kube, door: str, namespaces: tuple[str | None, ...],
                 apply: Callable[[list[Runtime]], None] = lambda runtimes: None) -> None:
        self.kube = kube
        self.door = door
        self.namespaces = namespaces
        #: Where the runtimes go (the door sets it: its service's ``set_runtimes``).
        self.apply = apply
        self.synced = asyncio.Event()
        #: (kind, namespace or "", name) -> the runtime.
        self._known: dict[tuple[str, str, str], Runtime] = {}
        self._flush_due = False
        #: key -> the resourceVersion it was deleted at (a read that started before the
        #: deletion must not bring it back).
        self._gone: dict[tuple[str, str, str], int] = {}
        #: (kind, namespace or "") -> runtimes known there.
        self._count: dict[tuple[str, str], int] = {}

    async def probe(self) -> list[str]:
        """The kinds the cluster serves (module docstring)."""
        served = []
        for kind, plural in KINDS.items():
            try:
                await self.kube.raw(f"list {kind}s", self.kube.custom.list_cluster_custom_object,
                                    GROUP, VERSION, plural, limit=1)
            except BackendRejected as exc:
                if not is_status(exc, 404):
                    raise
                log.warning("front door %s: the cluster has no %s resource; runtimes come "
                            "from the bridge's files: %s", self.door, kind, exc)
                continue
            served.append(kind)
        return served

    async def run(self, kinds: list[str]) -> None:
        """Follow ``kinds`` (from :meth:`probe`) until cancelled."""
        streams = [(kind, None) if kind == "ClusterTrainingRuntime" else (kind, ns)
                   for kind in kinds
                   for ns in ((None,) if kind == "ClusterTrainingRuntime" else self.namespaces)]
        waiting = {*streams}
        if not waiting:
            self.synced.set()
            await asyncio.Event().wait()  # nothing to follow

        async def follow(kind: str, namespace: str | None) -> None:
            plural = KINDS[kind]
            if namespace is None:
                stream = self.kube.list_watch(
                    f"{kind}s", self.kube.custom.list_cluster_custom_object, GROUP, VERSION,
                    plural)
            else:
                stream = self.kube.list_watch(
                    f"{kind}s in {namespace}", self.kube.custom.list_namespaced_custom_object,
                    GROUP, VERSION, namespace, plural)
            async for event, payload in stream:
                if event == "SYNC":
                    for key in [k for k in self._known if k[0] == kind
                                and (namespace is None or k[1] == namespace)]:
                        self._drop(key)
                    for obj in payload:
                        self._put(kind, obj)
                    waiting.discard((kind, namespace))
                elif event == "DELETED":
                    key = self._key(kind, payload)
                    self._drop(key)
                    if len(self._gone) >= MAX_TOMBSTONES:
                        self._gone.clear()
                    self._gone[key] = _version(payload)
                else:
                    self._put(kind, payload)
                if not waiting and not self._flush_due:
                    # Once per burst of events: a namespace that makes thousands of
                    # runtimes costs one catalog rebuild per burst, not one per runtime.
                    self._flush_due = True
                    asyncio.get_running_loop().call_soon(self._flush)

        tasks = [asyncio.create_task(follow(kind, ns), name=f"{self.door}-{kind}-{ns or 'all'}")
                 for kind, ns in streams]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def came_since(self, exc: ValidationError, job: TrainJob) -> bool:
        """Whether ``exc`` refused ``job`` for an unknown runtime that the apiserver has
        now (:meth:`fetch`: it is in the catalog, and admitting again may succeed)."""
        if not any(loc == "spec.runtimeRef.name" and msg.startswith("unknown ")
                   for loc, msg in exc.errors):
            return False
        ref = job.spec.runtime_ref
        if ref.kind not in KINDS:
            return False
        return await self.fetch(ref.kind, job.metadata.namespace or "default", ref.name)

    async def fetch(self, kind: str, namespace: str, name: str) -> bool:
        """Read one runtime from the apiserver now (a TrainJob names one the watch has
        not brought yet: created just before it); True when it is there and reads, and
        then it is in the catalog."""
        plural = KINDS[kind]
        try:
            if kind == "ClusterTrainingRuntime":
                obj = await self.kube.raw(f"get {kind} {name}",
                                          self.kube.custom.get_cluster_custom_object,
                                          GROUP, VERSION, plural, name)
            else:
                obj = await self.kube.raw(f"get {kind} {namespace}/{name}",
                                          self.kube.custom.get_namespaced_custom_object,
                                          GROUP, VERSION, namespace, plural, name)
        except BackendRejected as exc:
            if is_status(exc, 404):
                return False
            raise
        key = self._key(kind, obj)
        gone = self._gone.get(key)
        if gone is not None and gone >= _version(obj):
            return False  # its deletion came through the watch while this read was out
        self._put(kind, obj)
        if key not in self._known:
            return False
        self.apply(list(self._known.values()))
        return True

    def _drop(self, key: tuple[str, str, str]) -> None:
        if self._known.pop(key, None) is not None:
            self._count[key[:2]] -= 1

    def _flush(self) -> None:
        self._flush_due = False
        self.apply(list(self._known.values()))
        self.synced.set()

    @staticmethod
    def _key(kind: str, obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj.get("metadata") or {}
        return (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def _put(self, kind: str, obj: dict[str, Any]) -> None:
        key = self._key(kind, obj)
        try:
            size = len(json.dumps(obj.get("spec"), separators=(",", ":")))
            if size > MAX_RUNTIME_BYTES:
                raise ValidationError([("spec", f"{size} bytes; the bridge reads runtimes "
                                                f"of at most {MAX_RUNTIME_BYTES}")])
            if key not in self._known and self._count.get(key[:2], 0) >= MAX_RUNTIMES_PER_SCOPE:
                raise ValidationError([("", f"more than {MAX_RUNTIMES_PER_SCOPE} {kind}s "
                                            f"{'in ' + key[1] if key[1] else 'in the cluster'}"
                                            "; the bridge reads no more")])
            runtime = parse_runtime(kind, obj)
            if key not in self._known:
                self._count[key[:2]] = self._count.get(key[:2], 0) + 1
            self._known[key] = runtime
        except (ValidationError, RecursionError) as exc:
            self._drop(key)
            log.warning("front door %s: %s %s is left out: %s", self.door, kind,
                        "/".join(p for p in key[1:] if p), exc)
