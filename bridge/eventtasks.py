"""Start and stop the daemon's event machinery: the outbox feed (always: it serves
``GET /v1/events``), the MQTT publisher (``[events.mqtt]``) and the metrics listener
(``[metrics] listen``). Each runs as its own task, so none of them can slow the engine.

Events older than ``[events] retention_hours`` are removed hourly
(:func:`prune_forever`; unpublished ones are kept while MQTT is configured).

Contract: :func:`make_feed` is called first (the daemon's :class:`bridge.service.JobService`
is built on the feed), :func:`start_event_tasks` before the API app starts (it adds the
``/v1/events`` route and, with metrics, the request-counting middleware); an insecure
MQTT password file raises :class:`bridge.filemodes.InsecureFile` there, so the daemon
refuses to start.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from dataclasses import dataclass, field

import structlog
from aiohttp import web

from bridge.api_events import add_routes
from bridge.config import Config
from bridge.feed import EventFeed
from bridge.metrics import Metrics
from bridge.outbox import PRUNE_BATCH
from bridge.publisher import Publisher
from bridge.store import Store

log = structlog.get_logger("hpc_bridge.events")


def make_feed(store: Store, metrics: Metrics | None = None) -> EventFeed:
    """The outbox feed of ``store``; ``metrics`` (if any) observe its events."""
    return EventFeed(store, observers=[metrics.observe_events] if metrics else [])


@dataclass
class EventTasks:
    feed: EventFeed
    publisher: Publisher | None
    metrics: Metrics | None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    metrics_runner: web.AppRunner | None = None


async def start_event_tasks(config: Config, feed: EventFeed, app: web.Application,
                            metrics: Metrics | None = None) -> EventTasks:
    """Start ``feed`` (:func:`make_feed`) and what ``config`` asks for; wire
    ``/v1/events`` into ``app``. ``metrics`` (the daemon's, made when ``[metrics]
    listen`` is set) is served."""
    publisher = None
    if config.events.mqtt is not None:
        publisher = Publisher(feed.store, feed, config.events.mqtt,
                              on_published=metrics.observe_published if metrics else None)
    add_routes(app)
    running = EventTasks(feed, publisher, metrics)
    if metrics is not None and config.metrics.listen:
        metrics.publisher = publisher
        app.middlewares.insert(0, metrics.middleware)
        running.metrics_runner = await metrics.serve(config.metrics.listen)
    running.tasks.append(asyncio.create_task(feed.run(), name="event-feed"))
    if config.events.retention_hours > 0:
        running.tasks.append(asyncio.create_task(
            prune_forever(feed.store, config.events.retention_hours * 3600.0,
                          published_only=publisher is not None), name="outbox-retention"))
    if publisher is not None:
        running.tasks.append(asyncio.create_task(publisher.run(), name="mqtt-publisher"))
    return running


#: How often old events are removed (seconds).
PRUNE_INTERVAL = 3600.0


async def prune_forever(store: Store, keep_seconds: float, *, published_only: bool) -> None:
    """Remove events older than ``keep_seconds`` every :data:`PRUNE_INTERVAL` (the first
    time at once), in batches that each yield to the loop."""
    while True:
        try:
            removed = 0
            boundary = store.event_boundary(time.time() - keep_seconds)
            while True:
                batch = store.prune_events(boundary, published_only=published_only)
                removed += batch
                if batch < PRUNE_BATCH:
                    break
                await asyncio.sleep(0)
            if removed:
                log.info("old events removed from the outbox", removed=removed)
        except Exception:  # a busy database: next time
            log.exception("removing old events failed")
        await asyncio.sleep(PRUNE_INTERVAL)


async def stop_event_tasks(running: EventTasks) -> None:
    for task in running.tasks:
        task.cancel()
    for task in running.tasks:
        with suppress(asyncio.CancelledError):
            await task
    if running.metrics_runner is not None:
        await running.metrics_runner.cleanup()
