"""The MQTT publisher: a daemon task that drains the outbox to a broker (aiomqtt).

Loop: read up to ``batch_size`` unpublished outbox rows, send their messages
(:func:`bridge.events.plan_batch`) with QoS 1, and mark published the events of the
longest prefix of the batch whose every message got its PUBACK
(:func:`bridge.events.acked_prefix`). With nothing to send it waits on the
:class:`bridge.feed.EventFeed`.

Faults: a broker that is down, refuses the connection or stops acknowledging costs this
task a reconnect with exponential backoff (``retry_base`` doubling to ``retry_cap``,
with jitter: :class:`bridge.backoff.Backoff`); nothing is marked published that the
broker has not acknowledged, so the backlog drains after the broker is back, in order,
and events whose acknowledgement was lost are sent again with the same ``id``. The
engine never waits for this task: it only writes outbox rows, in the transaction of the
state change.

A warning is logged when the backlog passes ``backlog_warn`` (once per crossing) and an
info line when it has drained again.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

import aiomqtt
import structlog

from bridge.backoff import Backoff
from bridge.events import acked_prefix, plan_batch
from bridge.feed import EventFeed
from bridge.filemodes import check_secret_file
from bridge.outbox import Event
from bridge.settings_events import MqttSection
from bridge.store import Store

log = structlog.get_logger("hpc_bridge.publisher")

ClientFactory = Callable[[], aiomqtt.Client]
#: Messages handed to the client at once (bench/events.py: smaller windows stall on
#: their last acknowledgement; larger ones spend more in aiomqtt's bookkeeping).
WINDOW = 1000


def read_password(settings: MqttSection) -> str | None:
    """The broker password from ``password_file`` (refused, ``InsecureFile``, when group
    or others may read it); None without one. Trailing newlines are not part of it."""
    if settings.password_file is None:
        return None
    check_secret_file(settings.password_file, "MQTT password file")
    return settings.password_file.read_text().rstrip("\r\n")


def client_factory(settings: MqttSection) -> ClientFactory:
    """A function making a fresh :class:`aiomqtt.Client` for ``settings`` (the password
    is read, and its file's mode checked, once, here)."""
    password = read_password(settings)
    tls: aiomqtt.TLSParameters | None = None
    if settings.tls:
        tls = aiomqtt.TLSParameters(
            ca_certs=str(settings.ca_file) if settings.ca_file else None,
            certfile=str(settings.cert_file) if settings.cert_file else None,
            keyfile=str(settings.key_file) if settings.key_file else None,
            cert_reqs=ssl.CERT_REQUIRED, tls_version=ssl.PROTOCOL_TLS_CLIENT)
    identifier = settings.client_id or f"hpc-bridge-{socket.gethostname()}"

    def make() -> aiomqtt.Client:
        client = aiomqtt.Client(settings.host, settings.port, username=settings.username,
                                password=password, identifier=identifier, tls_params=tls,
                                keepalive=settings.keepalive,
                                timeout=settings.publish_timeout,
                                max_inflight_messages=settings.max_inflight)
        # A window of messages is sent at once: they are the expected pending calls
        # (aiomqtt would log a warning per message above its default of 10).
        client.pending_calls_threshold = WINDOW + 1
        return client
    return make


class Publisher:
    """Publishes the outbox to MQTT; run :meth:`run` as its own task."""

    def __init__(self, store: Store, feed: EventFeed, settings: MqttSection,
                 make_client: ClientFactory | None = None,
                 on_published: Callable[[Sequence[Event]], None] | None = None) -> None:
        self.store = store
        self.feed = feed
        self.settings = settings
        self._make_client = make_client or client_factory(settings)
        self._on_published = on_published
        self.connected = False
        self.published_total = 0
        self._backlog_high = False

    async def run(self) -> None:
        """Connect, drain, reconnect after failures; until cancelled."""
        backoff = Backoff(self.settings.retry_base, self.settings.retry_cap)
        while True:
            try:
                async with self._make_client() as client:
                    self.connected = True
                    backoff.reset()
                    log.info("connected to the MQTT broker", host=self.settings.host,
                             port=self.settings.port, prefix=self.settings.prefix)
                    await self._drain_forever(client)
            except aiomqtt.MqttError as exc:
                delay = backoff.delay()
                log.warning("MQTT broker unavailable; retrying", host=self.settings.host,
                            port=self.settings.port, error=str(exc), retry_in=round(delay, 2))
            except Exception:  # a bug must not end publishing for the daemon's life
                delay = backoff.delay()
                log.exception("MQTT publisher failed; retrying", retry_in=round(delay, 2))
            finally:
                self.connected = False
            await asyncio.sleep(delay)

    async def _drain_forever(self, client: aiomqtt.Client) -> NoReturn:
        while True:
            seen = self.feed.last_id
            batch = self.store.pending_events(self.settings.batch_size)
            if not batch:
                await self.feed.wait_after(seen, 1.0)
                continue
            self._watch_backlog(len(batch))
            await self.publish_batch(client, batch)

    async def publish_batch(self, client: aiomqtt.Client, batch: Sequence[Event]) -> int:
        """Send ``batch``; mark and return how many of its events count as published.
        Raises :class:`aiomqtt.MqttError` when not all did (the connection is suspect)."""
        messages = plan_batch(self.settings.prefix, batch)
        results: list[BaseException | None] = []
        for start in range(0, len(messages), WINDOW):
            # Tasks start in order, so paho queues the PUBLISH packets in sequence order
            # (and sends at most max_inflight unacknowledged). One WINDOW at a time:
            # aiomqtt's cost per publish grows with the calls pending, and after a
            # failure nothing more is sent.
            results += await asyncio.gather(
                *(client.publish(m.topic, m.payload, qos=1, retain=m.retain)
                  for m in messages[start:start + WINDOW]), return_exceptions=True)
            if any(r is not None for r in results):
                break
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result  # cancellation, KeyboardInterrupt
        acked = [r is None for r in results] + [False] * (len(messages) - len(results))
        done = acked_prefix(batch, messages, acked)
        if done:
            self.store.mark_published(done)
            self.published_total += len(done)
            if self._on_published is not None:
                self._on_published(batch[:len(done)])
        if len(done) < len(batch):
            error = next(r for r in results if isinstance(r, Exception))
            raise aiomqtt.MqttError(f"{len(batch) - len(done)} of {len(batch)} events not "
                                    f"acknowledged: {error}")
        return len(done)

    def _watch_backlog(self, batch_len: int) -> None:
        """Log when the backlog crosses ``backlog_warn`` (counted only when a full
        batch suggests there may be one)."""
        if batch_len < self.settings.batch_size and not self._backlog_high:
            return
        waiting, oldest = self.store.outbox_backlog()
        if waiting >= self.settings.backlog_warn and not self._backlog_high:
            self._backlog_high = True
            log.warning("event backlog is growing", waiting=waiting,
                        oldest_age_s=round(time.time() - oldest, 1) if oldest else None)
        elif waiting < self.settings.backlog_warn // 2 and self._backlog_high:
            self._backlog_high = False
            log.info("event backlog drained", waiting=waiting)
