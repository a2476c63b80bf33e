"""The daemon's HTTP API: over a unix socket (identity from ``SO_PEERCRED``) and,
optionally, over TCP with bearer tokens.

Routes (JSON unless stated):

* ``POST /v1/jobs`` — body: a TrainJob document. 201 ``{id, uid, name, state}``. With an
  ``Idempotency-Key`` header (per caller), a retry answers 200 with the first job.
* ``POST /v1/sbatch`` — body: what ``tbatch`` was given (arguments, script, working
  directory, environment; :mod:`bridge.sbatch.submission`), parsed here as sbatch
  parses it; answers as ``POST /v1/jobs`` (:mod:`bridge.api_submit`), and 400 with
  tbatch's message naming the option and ``#SBATCH`` line.
* ``GET /v1/jobs?states=Pending,Running|all&user=U&backend=B&limit=N&continue=T`` —
  one page ``{"items": [JobView without trainJob], "metadata": {"continue": T}}``,
  oldest first; without ``states`` only jobs that are not finished (like ``squeue``).
  As Kubernetes' ``limit``/``continue``: at most ``limit`` items (default 500, at most
  5000); ``metadata.continue`` is present while more follow, and the next page is asked
  for with it and the same filters. Served from light rows (no document decoded).
  With ``Accept: text/plain``: squeue's default table as text, the whole listing in one
  streamed answer (``tqueue``'s default view; :mod:`bridge.api_table`).
* ``GET /v1/jobs/{ref}`` — a JobView with ``trainJob`` (the whole document) and
  ``transitions``; ``ref`` is the numeric id (global), the TrainJob uid or its
  ``metadata.name``, the caller's own jobs first (:mod:`bridge.refs`); 409 listing the
  candidates when it names several users' jobs.
* ``POST /v1/jobs/{ref}/cancel`` (also ``DELETE /v1/jobs/{ref}``) — 202 JobView.
* ``POST /v1/jobs/{ref}/suspend`` and ``/resume``; ``/hold`` and ``/release`` (a job
  that has not started, before its back end or in Slurm's queue, as ``scontrol
  hold``/``release``).
* ``GET /v1/jobs/{ref}/log?stream=stdout|stderr&offset=N&follow=0|1`` — the output
  bytes, streamed; with ``follow=1`` until the job has finished and its output is drained.
* ``GET /v1/healthz[?ready=1]`` — ``{ok, ready, role}`` (role ``single``, ``leader`` or
  ``standby``); with ``ready=1`` 503 until ready. Also served alone, without
  credentials, on ``daemon.health`` (``host:port``) for a kubelet's probes.

Errors are ``{"error": message}`` with 400 (bad input: a body that is not a UTF-8 JSON
TrainJob within :func:`bridge.model.check_shape`'s limits, an unknown or repeated query
parameter, a bad value), 401, 403, 404 (no such job or route), 405, 409, 413 (a body or
batch script over ``limits.max_request_bytes``/``limits.max_script_bytes``; the message
names the setting) and 429 (a per-user limit, :mod:`bridge.limits`: with ``Retry-After``
in seconds, and ``"limit"`` naming it); never a 5xx for anything a caller sends.
Validation of a submitted job runs in a worker thread, never on the event loop; the
store is only touched from the loop.

Identity: on the unix socket the caller is who the kernel says it is (peer
credentials); the request body never names the caller. On TCP, a token from a
file in kube-apiserver's static token format (``token,user,uid[,"groups"]``)
names the user.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from aiohttp import web

from bridge.api_common import (
    DEFAULT_PAGE,
    LIMITS_KEY,
    OWNER_KEY,
    SERVICE_KEY,
    TOKENS_KEY,
    error_response,
    listing_states,
    query_params,
    refuse,
    too_many,
)
from bridge.api_submit import submit, submit_sbatch
from bridge.api_table import list_table, wants_table
from bridge.backend import Owner
from bridge.callers import bearer_token, peer_owner
from bridge.errors import BridgeError, Conflict, EngineError, InvalidRequest, PermissionDenied
from bridge.gate import GatedSockSite, GatedUnixSite, prepaid
from bridge.limits import LimitExceeded, LimitSettings, UserLimits
from bridge.model import (
    ValidationError,
)
from bridge.output import OutputRefused
from bridge.service import (
    AmbiguousJob,
    JobNotFound,
    JobRecord,
    JobService,
)
from bridge.views import job_view, list_view_of_row

log = structlog.get_logger("hpc_bridge.api")

#: The most items in a page of ``GET /v1/jobs`` (without ``limit``: DEFAULT_PAGE).
MAX_PAGE = 5000
#: Connections the kernel queues for the daemon (one user's flood of connects must
#: not leave no room for another's; Linux caps it at net.core.somaxconn).
LISTEN_BACKLOG = 4096


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def identity_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Attach the caller's :class:`Owner`; refuse unauthenticated TCP callers. Every
    refusal, aiohttp's own included (no route, method, body too large), is a JSON
    ``{"error": message}``."""
    try:
        return await _identified(request, handler)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, _http_message(request, exc), headers=exc.headers)


async def _identified(request: web.Request, handler: Handler) -> web.StreamResponse:
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None and sock.family == socket.AF_UNIX:
        owner = peer_owner(sock)
    else:
        tokens: dict[str, Owner] = request.app[TOKENS_KEY]
        given = bearer_token(request.headers.get("Authorization", ""))
        # Header bytes that are not UTF-8 arrive as surrogates; they match no token.
        raw = given.encode(errors="surrogateescape")
        match = next((o for t, o in tokens.items()
                      if raw and hmac.compare_digest(t.encode(), raw)), None)
        if match is None:
            return error_response(401, "missing or invalid bearer token")
        owner = match
    request[OWNER_KEY] = owner
    limits = request.app[LIMITS_KEY]
    try:
        if not prepaid(request.transport):  # else charged at accept (bridge.gate)
            limits.check_request(owner.uid, owner.user)
        limits.enter(owner.uid, owner.user)
    except LimitExceeded as exc:
        return await refuse(request, too_many(exc))
    try:
        return await handler(request)
    except LimitExceeded as exc:
        return await refuse(request, too_many(exc))
    except BridgeError as exc:
        status = next((code for cls, code in ERROR_STATUS if isinstance(exc, cls)), None)
        if status is None:
            raise
        return error_response(status, f"job {exc.args[0]} not found"
                      if isinstance(exc, JobNotFound) else str(exc))
    finally:
        limits.leave(owner.uid)


#: The one mapping of error classes to HTTP statuses: the first class an error is an
#: instance of answers ``{"error": str(exc)}`` (JobNotFound: "job REF not found"); an
#: error of no class here propagates. LimitExceeded: 429 with Retry-After (above).
ERROR_STATUS: tuple[tuple[type[BridgeError], int], ...] = (
    (ValidationError, 400), (InvalidRequest, 400), (PermissionDenied, 403),
    (JobNotFound, 404), (Conflict, 409), (AmbiguousJob, 409), (EngineError, 400))


def _http_message(request: web.Request, exc: web.HTTPException) -> str:
    if isinstance(exc, web.HTTPNotFound):
        return f"no such route: {request.method} {request.path}"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return (f"method {request.method} not allowed on {request.path}; allowed: "
                f"{', '.join(sorted(exc.allowed_methods))}")
    default = f"{exc.status}: {exc.reason}"
    return exc.text if exc.text and exc.text != default else exc.reason


def _find(request: web.Request, allowed: frozenset[str] = frozenset({"namespace"})
          ) -> JobRecord:
    """The job ``{ref}`` names for this caller (:func:`bridge.refs.resolve`); an unknown
    query parameter is a 400."""
    namespace = query_params(request, allowed).get("namespace")
    return request.app[SERVICE_KEY].find(request.match_info["ref"], namespace,
                                         request[OWNER_KEY])


def _continue_token(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": last_id}).encode()).decode()


def _after_id(token: str) -> int:
    """The id a ``continue`` token resumes after; ValueError when it is not one of ours."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise ValueError(token) from None
    after = data.get("after") if isinstance(data, dict) else None
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise ValueError(token)
    return after


def _compact_json(value: object) -> str:
    """JSON without the blanks after separators (a tenth of a listing's bytes)."""
    return json.dumps(value, separators=(",", ":"))


async def list_jobs(request: web.Request) -> web.StreamResponse:
    if wants_table(request):
        return await list_table(request)
    service = request.app[SERVICE_KEY]
    query = query_params(request, frozenset({"states", "user", "backend", "limit", "continue"}))
    states = listing_states(query.get("states"))
    try:
        limit = int(query.get("limit", str(DEFAULT_PAGE)))
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(limit)
    except ValueError:
        return error_response(400, f"limit must be an integer from 1 to {MAX_PAGE}")
    after: int | None = None
    if query.get("continue"):
        try:
            after = _after_id(query["continue"])
        except ValueError:
            return error_response(400, "continue: not a token from this daemon's job list "
                               "(pass metadata.continue of the previous page)")
    page = service.list_rows(states, user=query.get("user"), backend=query.get("backend"),
                             after_id=after, limit=limit)
    metadata = ({"continue": _continue_token(page.next_after)}
                if page.next_after is not None else {})
    statuses = service.trainer_statuses([r.id for r in page.items])
    return web.json_response({"items": [list_view_of_row(r, statuses.get(r.id))
                                        for r in page.items],
                              "metadata": metadata}, dumps=_compact_json)


async def show(request: web.Request) -> web.Response:
    return web.json_response(job_view(_find(request), request.app[SERVICE_KEY], True,
                                      viewer=request[OWNER_KEY]))


def _action(act: Callable[[JobService, JobRecord, Owner], JobRecord]) -> Handler:
    """A handler that applies ``act`` (a :class:`JobService` method) to the job ``{ref}``
    names and answers 202 with the job's view. A reference to a job array by its job id
    (``A``, not ``A_I``) acts on every unfinished task, as scancel/scontrol do, and
    answers the first task's view (:meth:`JobService.apply_to_array`)."""

    async def handle(request: web.Request) -> web.Response:
        service = request.app[SERVICE_KEY]
        rec = _find(request)
        caller = request[OWNER_KEY]
        if rec.array_job_id == rec.id and request.match_info["ref"] == str(rec.id):
            rec = await service.apply_to_array(rec, caller, act)
        else:
            rec = act(service, rec, caller)
        return web.json_response(job_view(rec, service), status=202)

    return handle


cancel = _action(JobService.cancel)
suspend = _action(JobService.suspend)
resume = _action(JobService.resume)
hold = _action(JobService.hold)
release = _action(JobService.release)


_FLAGS = {"0": False, "1": True, "false": False, "true": True, "no": False, "yes": True}


async def logs(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE_KEY]
    rec = _find(request, frozenset({"namespace", "stream", "offset", "follow"}))
    caller = request[OWNER_KEY]
    if caller.uid not in (0, rec.owner.uid):
        return error_response(
            403, "Access/permission denied: only the job's owner may read its output")
    query = request.query
    stream = query.get("stream", "stdout")
    if stream not in ("stdout", "stderr"):
        return error_response(400, "stream must be stdout or stderr")
    text = query.get("offset", "0")
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        return error_response(400, f"offset must be a byte count (0 to 18 digits), got {text!r}")
    offset = int(text)
    follow_q = query.get("follow", "0").lower()
    if follow_q not in _FLAGS:
        return error_response(400, f"follow must be one of {', '.join(_FLAGS)}, got {follow_q!r}")
    follow = _FLAGS[follow_q]
    response: web.StreamResponse | None = None
    while True:
        try:
            chunk = await service.read_output(rec.id, caller, stream, offset)
        except OutputRefused as exc:
            log.warning("output not read", job_id=rec.id, reason=str(exc))
            if response is None:  # nothing sent yet: the caller learns why
                return error_response(403, f"not reading the output of job {rec.id}: {exc}")
            break  # refused mid-stream (the file was swapped): stop there
        data, offset, finished = chunk.data, chunk.offset, chunk.finished
        if response is None:
            response = web.StreamResponse(
                headers={"Content-Type": "application/octet-stream"})
            await response.prepare(request)
        if data:
            await response.write(data)
            continue
        if not follow or finished:
            break
        if request.transport is None or request.transport.is_closing():
            break  # the reader went away: free its place (limits.max_concurrent_requests)
        await asyncio.sleep(0.5)
    await response.write_eof()
    return response


@dataclass
class Health:
    """What ``/v1/healthz`` reports: the role (``single``, ``standby``, ``leader``) and
    whether the daemon is ready to take jobs (changed as the daemon moves on)."""

    role: str = "single"
    ready: Callable[[], bool] = field(default=lambda: False)


HEALTH_KEY = web.AppKey("health", Health)


def _health(health: Health, wanted: bool) -> web.Response:
    """200 while the process serves (liveness); with ``?ready=1`` (``wanted``), 503
    until it is ready to take jobs (readiness: a standby replica never is)."""
    ready = health.ready()
    return web.json_response({"ok": True, "ready": ready, "role": health.role},
                             status=503 if wanted and not ready else 200)


async def healthz(request: web.Request) -> web.Response:
    try:  # the health app has no middleware to turn this into a 400
        params = query_params(request, frozenset({"ready"}))
    except ValidationError as exc:
        return error_response(400, str(exc))
    if params.get("ready", "0") not in ("0", "1"):
        return error_response(400, "ready must be 0 or 1")
    return _health(request.app[HEALTH_KEY], params.get("ready") == "1")


def make_health_app(health: Health) -> web.Application:
    """``/v1/healthz`` alone, without credentials (``daemon.health``: the kubelet's
    probes); it tells nothing about jobs."""
    app = web.Application()
    app[HEALTH_KEY] = health
    app.router.add_get("/v1/healthz", healthz)
    return app


async def serve_health(health: Health, address: str) -> web.AppRunner:
    """Serve :func:`make_health_app` on ``address`` (``host:port``)."""
    runner = web.AppRunner(make_health_app(health), access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    try:
        await web.TCPSite(runner, host or "127.0.0.1", int(port)).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def _log_limit_hits(app: web.Application) -> AsyncIterator[None]:
    """Every ``limits.log_interval`` seconds, log who was refused by which per-user
    limit how often (nothing when nobody was)."""
    limits = app[LIMITS_KEY]

    async def loop() -> None:
        while True:
            await asyncio.sleep(limits.settings.log_interval)
            counts = limits.take_hits()
            if counts:
                log.warning("per-user limits hit", counts=counts, total=limits.total_hits)

    task = asyncio.create_task(loop(), name="limit-hits-log")
    yield
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task


def make_app(service: JobService, tokens: dict[str, Owner] | None = None,
             limits: LimitSettings | None = None, health: Health | None = None
             ) -> web.Application:
    """The API application over ``service`` (its only way to jobs); ``limits``: the
    per-user limits (defaults when None); ``health``: what ``/v1/healthz`` reports
    (default: ``single``, ready once the engine is)."""
    user_limits = UserLimits(limits or LimitSettings())
    app = web.Application(middlewares=[identity_middleware],
                          client_max_size=user_limits.settings.max_request_bytes)
    app[SERVICE_KEY] = service
    app[HEALTH_KEY] = health or Health("single", service.is_ready)
    app[TOKENS_KEY] = tokens or {}
    app[LIMITS_KEY] = user_limits
    app.cleanup_ctx.append(_log_limit_hits)
    app.router.add_post("/v1/jobs", submit)
    app.router.add_post("/v1/sbatch", submit_sbatch)
    app.router.add_get("/v1/jobs", list_jobs)
    app.router.add_get("/v1/jobs/{ref}", show)
    app.router.add_post("/v1/jobs/{ref}/cancel", cancel)
    app.router.add_delete("/v1/jobs/{ref}", cancel)
    app.router.add_post("/v1/jobs/{ref}/suspend", suspend)
    app.router.add_post("/v1/jobs/{ref}/resume", resume)
    app.router.add_post("/v1/jobs/{ref}/hold", hold)
    app.router.add_post("/v1/jobs/{ref}/release", release)
    app.router.add_get("/v1/jobs/{ref}/log", logs)
    app.router.add_get("/v1/healthz", healthz)
    return app


def _answers(path: Path) -> bool:
    """Whether some process accepts connections on the unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


async def serve(app: web.Application, socket_path: str, tcp: str | None = None,
                inherited: Sequence[socket.socket] = ()) -> web.AppRunner:
    """Start listening on the unix socket (mode 0666: anyone may connect; identity is
    checked per request) and on ``tcp`` (``host:port``) if given.

    ``inherited``: listening sockets systemd passed (socket activation); they replace
    ``socket_path``, which systemd owns then. A socket file left by a killed daemon is
    replaced; one that another process still answers on is never removed (ValueError)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        if inherited:
            for sock in inherited:
                await GatedSockSite(runner, sock, app[LIMITS_KEY],
                                    backlog=LISTEN_BACKLOG).start()
        else:
            path = Path(socket_path)
            # The daemon's umask is 077: directories it makes must still let users reach
            # the socket (existing ones are the admin's, e.g. systemd's RuntimeDirectory).
            missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
            for directory in reversed(missing):
                directory.mkdir(exist_ok=True)
                directory.chmod(0o755)
            if path.is_socket():
                if _answers(path):
                    raise ValueError(f"another process answers on the API socket {path}: "
                                     f"is another hpc-bridge daemon running?")
                path.unlink()  # a stale socket from a killed daemon
            site = GatedUnixSite(runner, str(path), app[LIMITS_KEY], backlog=LISTEN_BACKLOG)
            await site.start()
            os.chmod(path, 0o666)  # noqa: S103 - every local user may connect; identity per request
        if tcp:
            host, _, port = tcp.rpartition(":")
            if not app[TOKENS_KEY]:
                raise ValueError("a TCP listener needs api.token_file (no anonymous TCP access)")
            await web.TCPSite(runner, host or "127.0.0.1", int(port)).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
