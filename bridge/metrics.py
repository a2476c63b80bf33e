"""Prometheus metrics of the daemon (prometheus-client), served on ``[metrics] listen``.

* ``hpcbridge_jobs{backend,state}`` — jobs by state, one ``GROUP BY`` at scrape time;
* ``hpcbridge_transitions_total{backend,from,to,reason}`` — every state change;
* ``hpcbridge_admissions_total{backend}`` — jobs admitted (their first event);
* ``hpcbridge_submissions_total{backend,result}`` — jobs leaving ``Pending`` for the
  back end (``result="ok"``) or failing there (``result`` = the reason, e.g.
  ``BackendRejected``);
* ``hpcbridge_submit_latency_seconds{backend}`` — admission to submitted (histogram);
* ``hpcbridge_outbox_backlog`` and ``hpcbridge_outbox_oldest_age_seconds`` — events not
  yet published and the age of the oldest (the publish lag);
* ``hpcbridge_events_published_total``, ``hpcbridge_event_publish_lag_seconds``
  (state change to PUBACK) and ``hpcbridge_mqtt_connected``;
* ``hpcbridge_api_requests_total{route,method,code}`` and
  ``hpcbridge_api_request_duration_seconds{route}``.

Counters count from the daemon's start (Prometheus handles the resets). They are fed
by the outbox (:class:`bridge.feed.EventFeed` observers), so every state change counts,
whoever made it (engine, API, front door). The listener serves ``/metrics`` only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from bridge.api import Handler
from bridge.outbox import Event
from bridge.publisher import Publisher
from bridge.store import Store

_LEAVING_PENDING = {"Submitted", "Running"}
#: Methods counted under their own name; any other is counted as ``other`` (a label
#: value per method a client makes up would be memory kept for the daemon's life).
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
_LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class _StoreCollector(Collector):
    """Gauges read from the store (and the publisher) when Prometheus scrapes."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("hpcbridge_jobs", "Jobs by back end and state",
                                 labels=["backend", "state"])
        for (backend, state), count in sorted(self._m.store.count_jobs().items()):
            jobs.add_metric([backend, state], count)
        yield jobs
        waiting, oldest = self._m.store.outbox_backlog()
        yield GaugeMetricFamily("hpcbridge_outbox_backlog",
                                "Events written but not yet published", value=waiting)
        yield GaugeMetricFamily("hpcbridge_outbox_oldest_age_seconds",
                                "Age of the oldest unpublished event (publish lag)",
                                value=time.time() - oldest if oldest else 0.0)
        publisher = self._m.publisher
        if publisher is not None:
            yield GaugeMetricFamily("hpcbridge_mqtt_connected",
                                    "1 while connected to the MQTT broker",
                                    value=1.0 if publisher.connected else 0.0)


class Metrics:
    """The daemon's metrics and their registry (one per daemon; tests make their own)."""

    def __init__(self, store: Store, publisher: Publisher | None = None) -> None:
        self.store = store
        self.publisher = publisher
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.transitions = Counter("hpcbridge_transitions", "Job state changes",
                                   ["backend", "from", "to", "reason"], registry=r)
        self.admissions = Counter("hpcbridge_admissions", "Jobs admitted", ["backend"],
                                  registry=r)
        self.submissions = Counter("hpcbridge_submissions",
                                   "Jobs handed to a back end (result ok) or failed there "
                                   "(result = reason)", ["backend", "result"], registry=r)
        self.submit_latency = Histogram("hpcbridge_submit_latency_seconds",
                                        "Admission to submitted", ["backend"],
                                        buckets=_LATENCY_BUCKETS, registry=r)
        self.published = Counter("hpcbridge_events_published", "Events acknowledged by "
                                 "the MQTT broker", registry=r)
        self.publish_lag = Histogram("hpcbridge_event_publish_lag_seconds",
                                     "State change to broker acknowledgement",
                                     buckets=_LATENCY_BUCKETS, registry=r)
        self.api_requests = Counter("hpcbridge_api_requests", "API requests",
                                    ["route", "method", "code"], registry=r)
        self.api_duration = Histogram("hpcbridge_api_request_duration_seconds",
                                      "API request handling time", ["route"], registry=r)
        r.register(_StoreCollector(self))
        self._created: dict[int, float] = {}

    # -- observers ---------------------------------------------------------------

    def observe_events(self, events: Sequence[Event]) -> None:
        """Count new outbox rows (an :class:`bridge.feed.EventFeed` observer)."""
        for event in events:
            p = event.payload
            if "to" not in p:  # a progress report (bridge/store_progress.py): no move
                continue
            backend, src, dst = str(p.get("backend")), p.get("from"), str(p.get("to"))
            self.transitions.labels(backend, str(src or ""), dst,
                                    str(p.get("reason", ""))).inc()
            if src is None:
                self.admissions.labels(backend).inc()
                self._created[event.job_id] = float(p["at"])
            elif src == "Pending" and dst in _LEAVING_PENDING:
                self.submissions.labels(backend, "ok").inc()
                created = self._created.pop(event.job_id, None)
                if created is None:
                    created = self.store.get(event.job_id).created_at
                self.submit_latency.labels(backend).observe(max(0.0, float(p["at"]) - created))
            elif src == "Pending" and dst == "Failed":
                self.submissions.labels(backend, str(p.get("reason", ""))).inc()
            if dst in ("Succeeded", "Failed", "Cancelled"):
                self._created.pop(event.job_id, None)

    def observe_published(self, events: Sequence[Event]) -> None:
        """Count events the broker acknowledged (a :class:`Publisher` callback)."""
        now = time.time()
        self.published.inc(len(events))
        for event in events:
            self.publish_lag.observe(max(0.0, now - float(event.payload["at"])))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler
                         ) -> web.StreamResponse:
        """Count API requests by route (its pattern, not the path) and status."""
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "(unmatched)"
        started = time.perf_counter()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            method = request.method if request.method in _METHODS else "other"
            self.api_requests.labels(route, method, str(code)).inc()
            self.api_duration.labels(route).observe(time.perf_counter() - started)

    # -- serving -----------------------------------------------------------------

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, listen: str) -> web.AppRunner:
        """Serve ``GET /metrics`` on ``listen`` (``host:port``)."""
        async def scrape(_: web.Request) -> web.Response:
            return web.Response(body=self.exposition(),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", scrape)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        host, _, port = listen.rpartition(":")
        await web.TCPSite(runner, host.strip("[]"), int(port)).start()
        return runner
