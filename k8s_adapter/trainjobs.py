"""The TrainJob objects the CR front door (:mod:`k8s_adapter.frontdoor`) writes to:
its finalizer, its ``/status`` subresource, the refusal annotation, the Events on it,
and pure helpers on the objects.

Contract: every call goes through :meth:`k8s_adapter.kube.Kube.call` (errors are
:class:`bridge.backend.BackendUnavailable` / :class:`bridge.backend.BackendRejected`);
a call that loses a race the next watch event settles (a finalizer list that changed,
a TrainJob that is gone) returns without an error.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import structlog

from bridge.backend import BackendRejected
from bridge.model import GROUP as TRAINER_GROUP
from bridge.model import VERSION as TRAINER_VERSION
from k8s_adapter.kube import JSON_PATCH, MERGE_PATCH, Kube, is_status

log = structlog.get_logger("k8s_adapter.frontdoor")

PLURAL = "trainjobs"
FINALIZER = "hpc-bridge.io/finalizer"
#: Annotation on a refused TrainJob: the generation that was refused.
ANN_REFUSED = "hpc-bridge.io/refused-generation"


class TrainJobCalls:
    """The door's writes to TrainJob objects, through ``kube``."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def add_finalizer(self, obj: dict[str, Any], fresh: bool = False
                            ) -> dict[str, Any]:
        """Add :data:`FINALIZER` to ``obj`` (tested against its ``resourceVersion``; on a
        conflict the object is read again and tried once more); the updated object."""
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": meta.get("resourceVersion")}]
        if finalizers:
            ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
        else:
            ops.append({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
        try:
            result: dict[str, Any] = await self.kube.call(
                f"add the finalizer to TrainJob {ref(obj)}",
                self.kube.custom.patch_namespaced_custom_object, TRAINER_GROUP,
                TRAINER_VERSION, meta.get("namespace"), PLURAL, meta.get("name"), ops,
                _content_type=JSON_PATCH)
        except BackendRejected as exc:
            if not is_status(exc, 422) or fresh:
                raise
            # Changed since this copy was read: read it again and try once more.
            latest = await self.get(obj)
            if latest is None:
                raise
            if FINALIZER in ((latest.get("metadata") or {}).get("finalizers") or []):
                return latest
            return await self.add_finalizer(latest, fresh=True)
        return result

    async def get(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The TrainJob as the apiserver has it now (None: it is gone, perhaps replaced
        by another of the same name, which has another uid)."""
        meta = obj.get("metadata") or {}
        try:
            latest: dict[str, Any] = await self.kube.call(
                f"get TrainJob {ref(obj)}", self.kube.custom.get_namespaced_custom_object,
                TRAINER_GROUP, TRAINER_VERSION, meta.get("namespace"), PLURAL, meta.get("name"))
        except BackendRejected as exc:
            if not is_status(exc, 404):
                raise
            return None
        if (latest.get("metadata") or {}).get("uid") != meta.get("uid"):
            return None
        return latest

    async def remove_finalizer(self, obj: Mapping[str, Any]) -> None:
        """Remove :data:`FINALIZER` from ``obj`` (if it has it)."""
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        index = finalizers.index(FINALIZER)
        ops = [{"op": "test", "path": f"/metadata/finalizers/{index}", "value": FINALIZER},
               {"op": "remove", "path": f"/metadata/finalizers/{index}"}]
        try:
            await self.kube.call(
                f"remove the finalizer of TrainJob {ref(obj)}",
                self.kube.custom.patch_namespaced_custom_object, TRAINER_GROUP,
                TRAINER_VERSION, meta.get("namespace"), PLURAL, meta.get("name"), ops,
                _content_type=JSON_PATCH)
            log.info("TrainJob %s: finalizer removed", ref(obj))
        except BackendRejected as exc:
            if not is_status(exc, 404, 422, 409):
                raise
            # 422: the test failed (the list changed); the next event retries.

    async def mark_refused(self, obj: Mapping[str, Any]) -> None:
        """Annotate ``obj`` with :data:`ANN_REFUSED`: its generation was refused (the
        mark survives a restart of the bridge)."""
        meta = obj.get("metadata") or {}
        await self.kube.call(
            f"annotate TrainJob {ref(obj)}", self.kube.custom.patch_namespaced_custom_object,
            TRAINER_GROUP, TRAINER_VERSION, meta.get("namespace"), PLURAL, meta.get("name"),
            {"metadata": {"annotations": {ANN_REFUSED: str(meta.get("generation") or "")}}},
            _content_type=MERGE_PATCH)

    async def patch_status(self, obj: Mapping[str, Any], status: dict[str, Any]) -> None:
        """Merge ``status`` into the TrainJob's ``/status`` (gone: nothing)."""
        meta = obj.get("metadata") or {}
        try:
            await self.kube.call(
                f"write the status of TrainJob {ref(obj)}",
                self.kube.custom.patch_namespaced_custom_object_status, TRAINER_GROUP,
                TRAINER_VERSION, meta.get("namespace"), PLURAL, meta.get("name"),
                {"status": status}, _content_type=MERGE_PATCH)
        except BackendRejected as exc:
            if not is_status(exc, 404):
                raise


    async def record_event(self, body: dict[str, Any]) -> None:
        """Create the core/v1 Event ``body`` (k8s_adapter/trainjob_events.py) in its
        namespace. The answer is not made into the client's model objects (that was
        3 % of the daemon's CPU running 200 TrainJobs)."""
        await self.kube.raw(
            f"record event {body.get('reason')} on TrainJob "
            f"{body['metadata'].get('namespace')}/{body['involvedObject'].get('name')}",
            self.kube.core.create_namespaced_event, body["metadata"].get("namespace"), body)


def ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def finished(obj: Mapping[str, Any]) -> bool:
    """Whether the TrainJob's status says it has finished (``Complete`` or ``Failed``)."""
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def document(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainJob as the bridge stores it: no status, no server-managed fields."""
    doc = copy.deepcopy(dict(obj))
    doc.pop("status", None)
    meta = doc.setdefault("metadata", {})
    for key in ("managedFields", "resourceVersion", "generation", "finalizers",
                "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    annotations.pop(ANN_REFUSED, None)
    return doc
