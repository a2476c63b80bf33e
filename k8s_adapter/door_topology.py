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
from k8s_adapter.access import ANN_ORIGIN, ORIGIN_KUBERNETES
from k8s_adapter.door_status import ORIGIN
from k8s_adapter.kueue_topology import asks_topology, entry_for, pod_sets, request_for
from k8s_adapter.topology_webhook import PATH, make_webhook_app
from k8s_adapter.trainjobs import document, ref

if TYPE_CHECKING:
    from k8s_adapter.frontdoor import FrontDoorSettings

__all__ = ["DoorTopology"]

log = structlog.get_logger("k8s_adapter.frontdoor")


class DoorTopology:
    """See the module docstring. ``ours``: whether a TrainJob is the door's;
    ``ready``: whether the door has read the cluster's runtimes."""

    def __init__(self, name: str, settings: FrontDoorSettings,
                 ours: Callable[[Mapping[str, Any]], bool], ready: Callable[[], bool]) -> None:
        self.name = name
        self.settings = settings
        self._ours = ours
        self._ready = ready
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
        entry, or None to leave it as it is: not this door's (its ``managed_by``, its
        namespaces), a back end Kueue does not place pods for (no queue label nor
        Kueue's entry yet: the apiserver calls again once Kueue's webhook added one),
        no switch request, the job or its runtime asks Kueue itself, or the door has
        not read the cluster's runtimes yet (the job is then refused, naming the
        webhook)."""
        meta = obj.get("metadata")
        if (self._service is None or not isinstance(meta, Mapping) or not self._ours(obj)
                or not self._ready()):
            return None
        annotations = meta.get("annotations")
        if not isinstance(annotations, Mapping) or ANN_SCHEDULING not in annotations:
            return None  # asks for no placement
        if self.settings.namespaces and meta.get("namespace") not in self.settings.namespaces:
            return None
        try:
            job = load_trainjob(document(obj), f"TrainJob {ref(obj)}")
        except ValidationError:
            return None
        # As the door admits it (k8s_adapter/frontdoor.py).
        chosen = job.metadata.annotations.get(ANN_BACKEND)
        if chosen is None and self.settings.backend:
            job.metadata.annotations[ANN_BACKEND] = self.settings.backend
        elif chosen not in (*self.settings.allowed_backends, self.settings.backend):
            return None  # refused at admission
        job.metadata.annotations[ANN_ORIGIN] = ORIGIN_KUBERNETES
        job.metadata.annotations[ANN_FRONTDOOR] = self.name
        destination = self._service.destination(job, ORIGIN)
        if destination is None:
            return None
        backend, plan = destination
        places = getattr(backend, "queue_places", None)
        if places is None or not places(job):
            return None
        try:
            request = request_for(scheduling_of(job), getattr(backend, "topology_labels", ()))
        except ValidationError:
            return None
        template = {"trainingRuntimeSpec": {"template": plan.extra.get("template")}}
        return entry_for(obj, request, pod_sets(plan.framework.value, plan.num_nodes),
                         runtime_asks=asks_topology([template]))
