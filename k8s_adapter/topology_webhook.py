"""The TrainJob door's mutating admission webhook: Kueue's topology request added when a
TrainJob is created (what and why: :mod:`k8s_adapter.kueue_topology`).

``POST /mutate-trainjob``, an ``admission.k8s.io/v1`` AdmissionReview over TLS (the
door's ``webhook_listen``, ``webhook_tls_cert``, ``webhook_tls_key``). Register it
with a MutatingWebhookConfiguration for ``CREATE`` of
``trainer.kubeflow.org/v1alpha1`` ``trainjobs``, ``sideEffects: None``,
``failurePolicy: Ignore`` and ``reinvocationPolicy: IfNeeded`` (Kueue's webhook may add
the queue label or its entry after this one ran: the apiserver then calls it again),
and no ``objectSelector`` for the same reason (docs/kubernetes.md, "Kueue").

Contract:

* The answer is always ``allowed: true``: this webhook adds, it never refuses. A
  TrainJob it cannot read passes unchanged; the door refuses it later, naming the field.
* The patch (JSONPatch, one ``add`` of ``/spec/runtimePatches``) is what ``decide``
  returns for the object: the door's runtime patches with the bridge's entry, or None
  for no patch (another operation, not the door's, no request, asks itself ...).
* A request that is not an AdmissionReview is a 400; one over :data:`MAX_BODY` bytes a
  413; at most :data:`CONCURRENCY` are read and answered at once. The handler never
  waits on the apiserver or a back end: the apiserver waits for it
  (``timeoutSeconds``). It has no side effect: whoever reaches the port learns only
  what patch a TrainJob would get.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from aiohttp import web

from bridge.model import ValidationError, parse_json_object

__all__ = ["CONCURRENCY", "MAX_BODY", "PATH", "make_webhook_app", "review_answer"]

log = structlog.get_logger("k8s_adapter.frontdoor")

PATH = "/mutate-trainjob"
#: A TrainJob is an object of etcd's (1.5 MiB at most), in the review's envelope.
MAX_BODY = 2 << 20
#: Reviews read and answered at once; more wait (the apiserver gives up after its
#: ``timeoutSeconds`` and, with ``failurePolicy: Ignore``, creates the TrainJob as is).
CONCURRENCY = 4

Decide = Callable[[dict[str, Any]], "list[dict[str, Any]] | None"]


def review_answer(review: Any, decide: Decide) -> dict[str, Any]:
    """The AdmissionReview answering ``review``; ValueError when it is none."""
    request = review.get("request") if isinstance(review, Mapping) else None
    if (not isinstance(request, Mapping) or not isinstance(request.get("uid"), str)
            or review.get("kind") != "AdmissionReview"):
        raise ValueError("not an admission.k8s.io/v1 AdmissionReview with a request.uid")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj = request.get("object")
    patches = None
    if request.get("operation") == "CREATE" and isinstance(obj, dict):
        try:
            patches = decide(obj)
        except Exception:  # a bug must not stop a TrainJob from being created
            log.exception("topology webhook: deciding failed; the TrainJob passes as it is")
    if patches is not None:
        ops = [{"op": "add", "path": "/spec/runtimePatches", "value": patches}]
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": response}


def make_webhook_app(decide: Decide) -> web.Application:
    """The webhook's aiohttp application (serve it over TLS)."""

    slots = asyncio.Semaphore(CONCURRENCY)

    async def mutate(request: web.Request) -> web.Response:
        try:
            async with slots:  # at most CONCURRENCY bodies held and decoded at once
                review = parse_json_object(await request.read(), "the AdmissionReview")
                answer = review_answer(review, decide)
        except (ValidationError, ValueError) as exc:
            return web.json_response({"error": f"not an AdmissionReview: {exc}"}, status=400)
        return web.json_response(answer)

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(PATH, mutate)
    return app
