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
for the cluster, with the door's own identity) and tells ``changed(uid)`` whenever a
TrainJob's hold begins, changes or ends. A cluster without Kueue (its Workload resource
is not served, or the door may not list it) is looked at again every
:data:`PROBE_SECONDS`; nothing else changes there. :func:`hold_of` is pure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from bridge.backend import BackendRejected, BackendUnavailable
from k8s_adapter.kube import Kube, is_status

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
    """See the module docstring."""

    def __init__(self, kube: Kube, changed: Callable[[str], None]):
        self.kube = kube
        self.changed = changed
        #: TrainJob uid -> (reason, message) while Kueue holds it.
        self.holds: dict[str, tuple[str, str]] = {}
        #: Workload (namespace, name) -> the TrainJob uid it stands for.
        self._uids: dict[tuple[str, str], str] = {}

    def hold(self, uid: str) -> tuple[str, str] | None:
        """Why Kueue holds TrainJob ``uid`` now (None: it does not, or no Kueue)."""
        return self.holds.get(uid)

    async def run(self) -> None:
        """Follow the Workloads until cancelled (module docstring)."""
        while True:  # looked at again, not waited on: nothing tells when Kueue comes
            if await self._served():
                break
            await asyncio.sleep(PROBE_SECONDS)
        async for kind, payload in self.kube.list_watch(
                "Kueue Workloads", self.kube.custom.list_cluster_custom_object, GROUP,
                VERSION, PLURAL, label_selector=JOB_UID_LABEL):
            if kind == "SYNC":
                seen = {self._key(w) for w in payload}
                for key in [k for k in self._uids if k not in seen]:
                    self._set(self._uids.pop(key), None)
                for workload in payload:
                    self._take(workload, deleted=False)
            else:
                self._take(payload, deleted=kind == "DELETED")

    async def _served(self) -> bool:
        try:
            await self.kube.raw("list Kueue Workloads", self.kube.custom.list_cluster_custom_object,
                                GROUP, VERSION, PLURAL, limit=1)
        except BackendRejected as exc:
            if not (is_status(exc, 404) or is_status(exc, 403)):
                raise
            log.info("no Kueue Workloads to follow (looked again in %.0f s): %s",
                     PROBE_SECONDS, exc)
            return False
        except BackendUnavailable as exc:
            log.warning("Kueue Workloads not listed (looked again in %.0f s): %s",
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
        if not uid:
            return
        if deleted:
            self._uids.pop(key, None)
            self._set(uid, None)
            return
        self._uids[key] = uid
        self._set(uid, hold_of(workload))

    def _set(self, uid: str, hold: tuple[str, str] | None) -> None:
        if self.holds.get(uid) == hold:
            return
        if hold is None:
            self.holds.pop(uid, None)
        else:
            self.holds[uid] = hold
        self.changed(uid)
