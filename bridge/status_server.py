"""The progress endpoint jobs report to (Kubeflow Trainer's KEP-2779 protocol, on every
back end; the report itself: bridge/trainer_status.py).

``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status``
over TLS, ``Authorization: Bearer TOKEN``, body ``{"trainerStatus": {...}}``.

Contract, in the order checked (nothing is stored unless every check passes):

* no bearer token: 401 (``WWW-Authenticate: Bearer``); a token that is not that of an
  unfinished job of that name (another job's, made up, or no such job: alike, so that
  no one learns which names are live): 403;
* more than ``rate`` reports a second for one job (after a burst of ``burst``), or
  ``user_rate`` for all of one user's jobs: 429 with ``Retry-After``;
* a body over ``max_body_bytes``: 413; a body that is not a report: 400 naming the field;
* the job ended meanwhile: 409. Otherwise 200 with the stored ``trainerStatus``: it is in
  the store (``tqueue``, ``tshow``, the TrainJob CR's status), and at most once every
  ``event_interval`` seconds per job an outbox event (MQTT, ``/v1/events``), so that a
  fast reporter does not grow the event stream.

Handlers are short and never wait on a back end: a report costs one lookup by the uid
the token carries (``UID.MAC``), one HMAC and one small write. :func:`sweep_tokens`
removes the token files of jobs that have ended.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
import uuid
from contextlib import suppress
from pathlib import Path

import structlog
from aiohttp import web

from bridge.backend import Owner
from bridge.config import TrainerStatusSection
from bridge.limits import TokenBuckets
from bridge.model import ValidationError
from bridge.states import TERMINAL, JobState
from bridge.store import Store
from bridge.store_progress import JobEnded
from bridge.trainer_status import (
    STATUS_PATH,
    ReportSettings,
    check_token_dir,
    load_secret,
    parse_report,
    remove_token_files,
    token_matches,
    token_uid,
    write_token_file,
)

__all__ = ["StatusEndpoint", "make_status_app", "report_settings", "serve_status",
           "sweep_tokens"]

log = structlog.get_logger("hpc_bridge.trainer_status")

_LIVE = [state for state in JobState if state not in TERMINAL]


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


def make_status_app(store: Store, secret: bytes, *, rate: float = 1.0, burst: int = 10,
                    user_rate: float = 20.0, user_burst: int = 100,
                    event_interval: float = 10.0,
                    max_body_bytes: int = 16384) -> web.Application:
    """The endpoint's application (module docstring)."""
    buckets = TokenBuckets(rate, burst, max_keys=65536)
    users = TokenBuckets(user_rate, user_burst, max_keys=65536)
    #: job id -> when its last report became an event (monotonic seconds).
    evented: dict[int, float] = {}

    def refused(status: int, message: str, **headers: str) -> web.Response:
        return _error(status, message, **headers)

    async def report(request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        name = request.match_info["name"]
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return refused(401, "a bearer token is needed (the file named by "
                           "KUBEFLOW_TRAINER_STATUS_TOKEN)", **{"WWW-Authenticate": "Bearer"})
        # The token names its job (by uid: one indexed row, however many jobs share the
        # name). No such job, another job's token, a made-up one and a job that ended
        # read alike: the endpoint tells no one which names are live.
        uid = token_uid(token)
        found = store.by_uids([uid], list(_LIVE)) if uid is not None else []
        rec = found[0] if found else None
        if (rec is None or (rec.namespace, rec.name) != (namespace, name)
                or not token_matches(secret, rec.uid, token)):
            return refused(403, f"the token is not that of an unfinished TrainJob "
                           f"{namespace}/{name}")
        job_id, owner = rec.id, rec.owner.uid
        wait = max(buckets.take(job_id), users.take(owner))
        if wait > 0:
            return refused(429, f"too many reports for job {job_id} (at most {rate:g} a "
                           f"second per job, {user_rate:g} per user)",
                           **{"Retry-After": str(max(1, int(wait + 0.999)))})
        try:
            body = await request.read()  # whole, however it arrives; 413 over the limit
        except web.HTTPRequestEntityTooLarge:
            return refused(413, f"the body is over {max_body_bytes} bytes")
        try:
            status = parse_report(body, time.time())
        except ValidationError as exc:
            return refused(400, str(exc))
        now = time.monotonic()
        # The last word of a run (100 %) is always an event: it must not be lost inside
        # an interval.
        event = (now - evented.get(job_id, -event_interval) >= event_interval
                 or status.get("progressPercentage") == 100)
        try:
            store.set_trainer_status(job_id, status, time.time(), event=event)
        except JobEnded:
            return refused(409, f"job {job_id} has ended")
        if event:
            evented[job_id] = now
            if len(evented) > 65536:  # ended jobs' entries: forget the oldest half
                for key in list(evented)[:32768]:
                    del evented[key]
        return web.json_response({"trainerStatus": status})

    app = web.Application(client_max_size=max_body_bytes)
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
    removed (a file of a job the store does not know is another daemon's: kept). One
    light query for all of them."""
    try:
        uids = [n.removesuffix(".token") for n in os.listdir(token_dir)
                if n.endswith(".token")]
    except FileNotFoundError:
        return 0
    ended = [r.uid for r in store.by_uids(uids, list(TERMINAL))]
    return remove_token_files(token_dir, ended)


def report_settings(section: TrainerStatusSection, state_dir: Path) -> ReportSettings | None:
    """Where jobs report, from ``[trainer_status]`` (None while it is off); checks
    ``token_dir`` (:func:`bridge.trainer_status.check_token_dir`, and a probe file written
    and removed) and reads the token secret (made in ``state_dir`` on first use).
    :class:`ValueError` when unusable: the daemon does not start."""
    if not section.listen:
        return None
    token_dir = Path(section.token_dir) if section.token_dir else None
    if token_dir is not None:
        check_token_dir(token_dir, state_dir)
        probe = str(uuid.uuid4())  # a root-squashed NFS shows here, not at each submission
        try:
            write_token_file(token_dir, probe, Owner(os.geteuid(), os.getegid(), "daemon"),
                             "probe")
            remove_token_files(token_dir, [probe])
        except OSError as exc:
            raise ValueError(f"trainer_status.token_dir {token_dir}: the daemon cannot write "
                             f"token files there: {exc}") from None
    port = section.listen.rpartition(":")[2]
    return ReportSettings(base_url=section.url or f"https://{socket.getfqdn()}:{port}",
                          token_dir=token_dir, ca_cert=section.ca_cert or section.tls_cert,
                          secret=load_secret(state_dir, section.secret_file))


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
                              user_rate=s.user_rate, user_burst=s.user_burst,
                              event_interval=s.event_interval,
                              max_body_bytes=s.max_body_bytes)
        self._runner = await serve_status(app, s.listen, tls_context(s.tls_cert, s.tls_key))
        self._sweep = asyncio.create_task(self._sweep_forever(), name="trainer-status-sweep")
        log.info("progress endpoint serving", listen=s.listen, url=self.reports.base_url)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.section.sweep_interval)
            if self.reports.token_dir is None:
                return
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
