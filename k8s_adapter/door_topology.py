"""The TrainJob door's part in handing a queued job's topology to Kueue
(:mod:`k8s_adapter.kueue_topology` says what and why): what its webhook
(:mod:`k8s_adapter.topology_webhook`) adds to a TrainJob being created.

Contract: :meth:`DoorTopology.serve` starts the webhook when the door is configured
with one (its runner, to clean up; None otherwise); :meth:`DoorTopology.for_webhook`
never raises for a TrainJob it cannot read (admission refuses it, naming the field).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from bridge.model import ANN_BACKEND, ANN_FRONTDOOR, ANN_SCHEDULING, ValidationError, load_trainjob
from bridge.scheduling import scheduling_of
from bridge.service import JobService
from bridge.status_server import serve_status, tls_context
from k8s_adapter.door_status import ORIGIN
from k8s_adapter.kube import Kube
from k8s_adapter.kueue import QUEUE_LABEL
from k8s_adapter.kueue_topology import asks_topology, entry_for, request_for
from k8s_adapter.topology_webhook import PATH, make_webhook_app
from k8s_adapter.trainjobs import document, ref

if TYPE_CHECKING:
    from k8s_adapter.frontdoor import FrontDoorSettings

__all__ = ["DoorTopology"]

log = structlog.get_logger("k8s_adapter.frontdoor")


class DoorTopology:
    """See the module docstring. ``ours``: whether a TrainJob is the door's."""

    def __init__(self, name: str, settings: FrontDoorSettings, kube: Kube,
                 ours: Callable[[Mapping[str, Any]], bool]) -> None:
        self.name = name
        self.settings = settings
        self.kube = kube
        self._ours = ours
        self._service: JobService | None = None

    async def serve(self, service: JobService) -> web.AppRunner | None:
        """Start the webhook (``webhook_listen``), or nothing."""
        self._service = service
        if not self.settings.webhook_listen:
            return None
        runner = await serve_status(make_webhook_app(self.for_webhook),
                                    self.settings.webhook_listen,
                                    tls_context(*self.settings.webhook_tls))
        log.info("TrainJob front door %s: topology webhook on https://%s%s", self.name,
                 self.settings.webhook_listen, PATH)
        return runner

    def for_webhook(self, obj: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The runtime patches of the TrainJob ``obj`` being created, with the bridge's
        entry, or None to leave it as it is (not this door's, Kueue does not queue it,
        nothing to hand over)."""
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        if not self._ours(obj) or not isinstance(labels, Mapping) or not labels.get(QUEUE_LABEL):
            return None
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        chosen = annotations.get(ANN_BACKEND) if isinstance(annotations, Mapping) else None
        allowed = {*self.settings.allowed_backends, self.settings.backend}
        return self.patches(obj, chosen if chosen in allowed else self.settings.backend)

    def patches(self, obj: dict[str, Any], backend: str | None) -> list[dict[str, Any]] | None:
        """``obj``'s runtime patches with the entry for its switch request on
        ``backend`` (None: the engine's default), or None."""
        meta = obj.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        if (self._service is None or not isinstance(annotations, Mapping)
                or ANN_SCHEDULING not in annotations):
            return None  # asks for no placement
        try:
            job = load_trainjob(document(obj), f"TrainJob {ref(obj)}")
            job.metadata.annotations[ANN_FRONTDOOR] = self.name  # its cluster's runtimes
            request = request_for(scheduling_of(job), self._service.topology_labels(backend))
        except ValidationError:
            return None
        patches = entry_for(obj, request)
        if patches is None:
            return None
        template = self._service.runtime_template(job, ORIGIN)
        if asks_topology([{"trainingRuntimeSpec": {"template": template}}]):
            return None  # its runtime asks for a topology itself
        return patches
