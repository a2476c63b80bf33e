"""The progress endpoint jobs report to (Kubeflow Trainer's KEP-2779 protocol, on every
back end; the report itself: bridge/trainer_status.py).

``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status``
over TLS, ``Authorization: Bearer TOKEN``, body ``{"trainerStatus": {...}}``.

Contract, in the order checked (nothing is stored unless every check passes):

* no bearer token: 401 (``WWW-Authenticate: Bearer``); no unfinished job of that name:
  404; a token that is not the job's (another job's, or made up): 403;
* more than ``rate`` reports a second for one job after a burst of ``burst``: 429 with
  ``Retry-After``;
* a body over ``max_body_bytes``: 413; a body that is not a report: 400 naming the field;
* the job ended meanwhile: 409. Otherwise 200 with the stored ``trainerStatus``: it is in
  the store, with its outbox event (MQTT, ``/v1/events``, the TrainJob CR's status).

Handlers are short and never wait on a back end: a flood of reports costs one HMAC and
one indexed query each, and one job's flood is refused by its own bucket.
:func:`sweep_tokens` removes the token files of jobs that have ended.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from contextlib import suppress
from pathlib import Path

import structlog
from aiohttp import web

from bridge.config import TrainerStatusSection
from bridge.limits import TokenBuckets
from bridge.model import ValidationError
from bridge.store import Store
from bridge.store_progress import JobEnded
from bridge.trainer_status import (
    STATUS_PATH,
    ReportSettings,
    load_secret,
    parse_report,
    token_matches,
)

__all__ = ["StatusEndpoint", "make_status_app", "report_settings", "serve_status",
           "sweep_tokens"]

log = structlog.get_logger("hpc_bridge.trainer_status")


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


def make_status_app(store: Store, secret: bytes, *, rate: float = 1.0, burst: int = 10,
                    max_body_bytes: int = 65536) -> web.Application:
    """The endpoint's application (module docstring)."""
    buckets = TokenBuckets(rate, burst, max_keys=65536)

    async def report(request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        name = request.match_info["name"]
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _error(401, "a bearer token is needed (the file named by "
                          "KUBEFLOW_TRAINER_STATUS_TOKEN)", **{"WWW-Authenticate": "Bearer"})
        jobs = store.live_by_name(namespace, name)
        if not jobs:
            return _error(404, f"no unfinished TrainJob {namespace}/{name}")
        job_id = next((i for i, uid in jobs if token_matches(secret, uid, token.strip())), None)
        if job_id is None:
            return _error(403, f"the token is not TrainJob {namespace}/{name}'s")
        wait = buckets.take(job_id)
        if wait > 0:
            return _error(429, f"too many reports for job {job_id}: at most {rate:g} a second",
                          **{"Retry-After": str(max(1, int(wait + 0.999)))})
        if request.content_length is not None and request.content_length > max_body_bytes:
            return _error(413, f"the body is over {max_body_bytes} bytes")
        try:
            body = await request.content.read(max_body_bytes + 1)
        except (ConnectionError, asyncio.IncompleteReadError):
            return _error(400, "the body could not be read")
        if len(body) > max_body_bytes:
            return _error(413, f"the body is over {max_body_bytes} bytes")
        try:
            status = parse_report(body, time.time())
        except ValidationError as exc:
            return _error(400, str(exc))
        try:
            store.set_trainer_status(job_id, status, time.time())
        except JobEnded:
            return _error(409, f"job {job_id} has ended")
        return web.json_response({"trainerStatus": status})

    app = web.Application(client_max_size=max_body_bytes + 1)
    app.router.add_post(STATUS_PATH, report)
    return app


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context of ``cert`` (chain) and ``key``, TLS 1.2 at least."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


async def serve_status(app: web.Application, listen: str, context: ssl.SSLContext
                       ) -> web.AppRunner:
    """Serve ``app`` over TLS on ``listen`` (``host:port``)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = listen.rpartition(":")
    await web.TCPSite(runner, host.strip("[]") or None, int(port), ssl_context=context).start()
    return runner


def sweep_tokens(store: Store, token_dir: Path) -> int:
    """Remove the token files of this store's jobs that have ended; how many were
    removed (a file of a job the store does not know is another daemon's: kept)."""
    removed = 0
    try:
        names = [p for p in token_dir.iterdir() if p.name.endswith(".token")]
    except FileNotFoundError:
        return 0
    for path in names:
        rec = store.get_by_uid(path.name.removesuffix(".token"))
        if rec is not None and rec.state.terminal:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def report_settings(section: TrainerStatusSection, state_dir: Path) -> ReportSettings | None:
    """Where jobs report, from ``[trainer_status]`` (None while it is off); makes the
    token secret in ``state_dir`` on first use."""
    if not section.listen:
        return None
    port = section.listen.rpartition(":")[2]
    return ReportSettings(base_url=section.url or f"https://{socket.getfqdn()}:{port}",
                          token_dir=Path(section.token_dir),
                          ca_cert=section.ca_cert or section.tls_cert,
                          secret=load_secret(state_dir))


class StatusEndpoint:
    """The endpoint served, and its sweep of ended jobs' token files (every
    ``sweep_interval`` seconds)."""

    def __init__(self, section: TrainerStatusSection, store: Store,
                 reports: ReportSettings) -> None:
        self.section = section
        self.store = store
        self.reports = reports
        self._runner: web.AppRunner | None = None
        self._sweep: asyncio.Task[None] | None = None

    async def start(self) -> None:
        s = self.section
        app = make_status_app(self.store, self.reports.secret, rate=s.rate, burst=s.burst,
                              max_body_bytes=s.max_body_bytes)
        self._runner = await serve_status(app, s.listen, tls_context(s.tls_cert, s.tls_key))
        self._sweep = asyncio.create_task(self._sweep_forever(), name="trainer-status-sweep")
        log.info("progress endpoint serving", listen=s.listen, url=self.reports.base_url)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.section.sweep_interval)
            try:
                sweep_tokens(self.store, self.reports.token_dir)
            except Exception:
                log.exception("sweeping progress token files failed")

    async def stop(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            with suppress(asyncio.CancelledError):
                await self._sweep
        if self._runner is not None:
            await self._runner.cleanup()
