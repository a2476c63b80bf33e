"""Why Kueue keeps a TrainJob suspended: a watch of Kueue's Workloads.

Kueue makes one Workload (``kueue.x-k8s.io/v1beta2``) per TrainJob it queues, labelled
``kueue.x-k8s.io/job-uid`` with the TrainJob's uid, and says on it why the job waits:
its ``QuotaReserved`` condition is ``False`` with a reason (``Pending``,
``Inadmissible`` …) and a message such as "couldn't assign flavors to pod set node:
insufficient unused quota for cpu in flavor default, 2 more needed". The TrainJob door
shows that reason and message on the TrainJob's ``Suspended`` condition while Kueue
holds it (:func:`k8s_adapter.status.desired_status`), so that ``kubectl describe
trainjob`` answers "why is my job not running" without a look at the Workload.

:class:`KueueWorkloads` follows the Workloads that carry that label (one list-then-watch
per namespace followed, with the door's own identity) and tells ``changed(uid)`` whenever a
TrainJob's hold begins, changes or ends; a hold counts only for a TrainJob of the
Workload's own namespace. It follows the door's namespaces (all, or each one). A cluster
without Kueue (its Workload resource is not served, or the door may not list it) is
looked at again every :data:`PROBE_SECONDS`; nothing else changes there. It keeps a
Workload's key, uid and hold, never the object. :func:`hold_of` is pure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from bridge.backend import BackendRejected, BackendUnavailable
from k8s_adapter.kube import Kube

__all__ = ["JOB_UID_LABEL", "KueueWorkloads", "hold_of"]

log = structlog.get_logger(__name__)

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
PLURAL = "workloads"
#: Kueue's label on a Workload: the uid of the job it stands for.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: How often a cluster without Kueue's Workloads is looked at again.
PROBE_SECONDS = 60.0


def hold_of(workload: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` of a Workload that has no quota reserved (its
    ``QuotaReserved`` condition, else ``Pending`` with no message), or None once it has
    quota or has finished."""
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get(
        "conditions") or [] if isinstance(c, Mapping)}
    if (conditions.get("Finished") or {}).get("status") == "True":
        return None
    reserved = conditions.get("QuotaReserved") or {}
    if reserved.get("status") == "True":
        return None
    return (str(reserved.get("reason") or "Pending"), str(reserved.get("message") or ""))


class KueueWorkloads:
    """See the module docstring. ``namespaces``: those to follow (None: all)."""

    def __init__(self, kube: Kube, changed: Callable[[str], None],
                 namespaces: Sequence[str | None] = (None,)):
        self.kube = kube
        self.changed = changed
        self.namespaces = tuple(namespaces) or (None,)
        #: Workload (namespace, name) -> (the TrainJob uid it names, Kueue's hold or None).
        self._workloads: dict[tuple[str, str], tuple[str, tuple[str, str] | None]] = {}
        #: TrainJob uid -> its Workloads' keys (Kueue replaces one by another).
        self._by_uid: dict[str, set[tuple[str, str]]] = {}

    def hold(self, uid: str, namespace: str) -> tuple[str, str] | None:
        """Why Kueue holds TrainJob ``uid`` of ``namespace`` now (None: it does not, or no
        Kueue): from a Workload of that namespace with that uid that holds it."""
        for key in sorted(self._by_uid.get(uid, ())):
            held = self._workloads[key][1]
            if key[0] == namespace and held is not None:
                return held
        return None

    async def run(self) -> None:
        """Follow the Workloads until cancelled (module docstring)."""
        await asyncio.gather(*(self._follow(ns) for ns in self.namespaces))

    async def _follow(self, namespace: str | None) -> None:
        while True:  # looked at again, not waited on: nothing tells when Kueue comes
            if await self._served(namespace):
                break
            await asyncio.sleep(PROBE_SECONDS)
        if namespace is None:
            stream = self.kube.list_watch(
                "Kueue Workloads", self.kube.custom.list_cluster_custom_object, GROUP,
                VERSION, PLURAL, label_selector=JOB_UID_LABEL)
        else:
            stream = self.kube.list_watch(
                f"Kueue Workloads in {namespace}", self.kube.custom.list_namespaced_custom_object,
                GROUP, VERSION, namespace, PLURAL, label_selector=JOB_UID_LABEL)
        async for kind, payload in stream:
            if kind == "SYNC":
                seen = {self._key(w) for w in payload}
                for key in [k for k in self._workloads
                            if k not in seen and (namespace is None or k[0] == namespace)]:
                    self._forget(key)
                for workload in payload:
                    self._take(workload, deleted=False)
            else:
                self._take(payload, deleted=kind == "DELETED")

    async def _served(self, namespace: str | None) -> bool:
        try:
            if namespace is None:
                await self.kube.raw("list Kueue Workloads",
                                    self.kube.custom.list_cluster_custom_object,
                                    GROUP, VERSION, PLURAL, limit=1)
            else:
                await self.kube.raw(f"list Kueue Workloads in {namespace}",
                                    self.kube.custom.list_namespaced_custom_object,
                                    GROUP, VERSION, namespace, PLURAL, limit=1)
        except (BackendRejected, BackendUnavailable) as exc:
            # No Workload resource (404), no right to list it (403: taken as the
            # bridge's misconfiguration), or no apiserver: not this watch's to fix.
            log.info("no Kueue Workloads followed (looked at again in %.0f s): %s",
                     PROBE_SECONDS, exc)
            return False
        return True

    @staticmethod
    def _key(workload: Mapping[str, Any]) -> tuple[str, str]:
        meta = workload.get("metadata") or {}
        return str(meta.get("namespace")), str(meta.get("name"))

    def _take(self, workload: Mapping[str, Any], deleted: bool) -> None:
        key = self._key(workload)
        uid = ((workload.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)
        if deleted or not uid:
            self._forget(key)
            return
        before = self._workloads.get(key)
        if before is not None and before[0] != uid:
            self._forget(key)
        self._workloads[key] = (str(uid), hold_of(workload))
        self._by_uid.setdefault(str(uid), set()).add(key)
        if before != self._workloads[key]:
            self.changed(str(uid))

    def _forget(self, key: tuple[str, str]) -> None:
        gone = self._workloads.pop(key, None)
        if gone is None:
            return
        keys = self._by_uid.get(gone[0], set())
        keys.discard(key)
        if not keys:
            self._by_uid.pop(gone[0], None)
        if gone[1] is not None:
            self.changed(gone[0])
