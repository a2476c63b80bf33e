"""An asyncio slurmrestd client (httpx), over a UNIX socket or a TCP URL.

httpx rather than aiohttp: slurmrestd 26.05 follows an error answer sent with
``Connection: Close`` by more bytes on the same connection, which aiohttp's
parser reports as a broken message ("Data after `Connection: close`") while
httpx reads the answer and drops the connection, as curl does.

One :class:`SlurmRestClient` speaks any :class:`~slurm_adapter.dialects.Dialect`;
versions are data, not subclasses.

Authentication is per request: ``X-SLURM-USER-NAME`` + ``X-SLURM-USER-TOKEN``
(slurmrestd started with ``-a rest_auth/jwt`` and ``SLURM_JWT=daemon``). Every
call names the user it acts as: jobs are submitted and cancelled as their owner,
never as the daemon's user. Tokens come from a :class:`TokenSource`:

* :class:`JwtSigner` signs HS256 tokens locally with Slurm's ``jwt_key`` (claims
  ``sun`` = user name, ``iat``, ``exp`` — the same claims ``scontrol token``
  issues), cached per user until shortly before expiry;
* :class:`ScontrolTokens` asks ``scontrol token username=U lifespan=S`` (works as
  root or SlurmUser only), cached the same way.

Errors: connection refused, missing socket, timeout, 5xx without Slurm errors,
an authentication failure or a Slurm error that means "controller unreachable"
-> :class:`BackendUnavailable`. Slurm ``errors`` refusing a submission or a
cancellation (slurmrestd answers them with HTTP 4xx *or* 500) ->
:class:`BackendRejected` with Slurm's message.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import structlog

from bridge.backend import BackendRejected, BackendUnavailable
from slurm_adapter.dialects import Dialect
from slurm_adapter.errors import classify, error_messages
from slurm_adapter.ids import is_slurm_id
from slurm_adapter.listing import decode_listing

__all__ = ["JwtSigner", "ScontrolTokens", "SlurmRestClient", "TokenSource", "hs256_token"]

log = structlog.get_logger(__name__)

#: Slurm error numbers that make a cancellation a no-op: "Invalid job id specified"
#: (unknown / purged job) and "Job/step already completing or completed".
CANCEL_NOOP_ERRORS = frozenset({2017, 2021})
#: "Invalid job id specified": Slurm does not hold (or no longer holds) the job.
INVALID_JOB_ID = 2017


class TokenSource(Protocol):
    """Where JWTs come from."""

    async def token(self, user: str) -> str:
        """A valid token for ``user``; raises :class:`BackendUnavailable` if none."""
        ...

    def invalidate(self, user: str) -> None:
        """Forget a cached token (it was refused)."""
        ...



#: Answers larger than this are decoded off the event loop (bytes).
OFF_LOOP_BYTES = 256 * 1024


def _decode(content: bytes) -> tuple[str, Any]:
    """An answer's text and its JSON (None when it is not JSON)."""
    text = content.decode(errors="replace")
    try:
        return text, json.loads(text) if text.strip() else None
    except ValueError:
        return text, None


def _decode_listing(content: bytes) -> tuple[str, Any]:
    """A job listing's answer: only the fields the bridge reads
    (:func:`slurm_adapter.listing.decode_listing`); any other answer as :func:`_decode`.
    The text is the answer's start only (what error messages quote)."""
    listing = decode_listing(content)
    if listing is None:
        return _decode(content)
    return content[:1024].decode(errors="replace"), listing

@dataclass
class _Cached:
    token: str
    expires: float


class _Cache:
    """Tokens per user, reused until ``margin`` seconds before they expire."""

    def __init__(self, lifespan: int, clock: Callable[[], float]):
        self.lifespan = lifespan
        self.clock = clock
        self.margin = min(300.0, lifespan / 5)
        self._tokens: dict[str, _Cached] = {}

    def get(self, user: str) -> str | None:
        cached = self._tokens.get(user)
        if cached is not None and cached.expires - self.margin > self.clock():
            return cached.token
        return None

    def put(self, user: str, token: str, issued: float) -> None:
        self._tokens[user] = _Cached(token, issued + self.lifespan)

    def drop(self, user: str) -> None:
        self._tokens.pop(user, None)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


#: The JOSE header of every token (RFC 7515/7519), compact JSON as PyJWT writes it.
_HS256_HEADER = _b64url(b'{"alg":"HS256","typ":"JWT"}')


def hs256_token(claims: dict[str, Any], key: bytes) -> str:
    """A JSON Web Token of ``claims`` signed with HMAC-SHA256 under ``key`` (RFC 7519,
    compact form: ``header.payload.signature``, base64url without padding).

    By hand, not with PyJWT: signing HS256 needs :mod:`hmac` alone, and importing PyJWT
    loads the cryptography package (~9 MB of the daemon's resident memory, a tenth of
    its size at 10,000 jobs; docs/operations.md). A unit test checks PyJWT reads these
    tokens, and slurmrestd's ``auth/jwt`` accepts them in every integration test."""
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode("utf-8"))
    signed = f"{_HS256_HEADER}.{payload}"
    signature = hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()
    return f"{signed}.{_b64url(signature)}"


class JwtSigner:
    """HS256 tokens signed with the cluster's ``jwt_key`` (read once, at first use)."""

    def __init__(self, key_path: str, lifespan: int = 3600,
                 clock: Callable[[], float] = time.time):
        self.key_path = key_path
        self._cache = _Cache(lifespan, clock)
        self._key: bytes | None = None

    def _load_key(self) -> bytes:
        if self._key is None:
            try:
                self._key = Path(self.key_path).read_bytes()
            except OSError as exc:
                raise BackendUnavailable(f"cannot read the Slurm JWT key {self.key_path}: "
                                         f"{exc.strerror or exc}") from exc
            if not self._key:
                raise BackendUnavailable(f"the Slurm JWT key {self.key_path} is empty")
        return self._key

    def sign(self, user: str) -> str:
        """A fresh token for ``user`` (not cached)."""
        now = int(self._cache.clock())
        claims = {"sun": user, "iat": now, "exp": now + self._cache.lifespan}
        return hs256_token(claims, self._load_key())

    async def token(self, user: str) -> str:
        cached = self._cache.get(user)
        if cached is not None:
            return cached
        issued = self._cache.clock()
        token = self.sign(user)
        self._cache.put(user, token, issued)
        return token

    def invalidate(self, user: str) -> None:
        self._cache.drop(user)


class ScontrolTokens:
    """Tokens from ``scontrol token username=U lifespan=S`` (root or SlurmUser only)."""

    def __init__(self, run: Callable[[list[str]], Awaitable[tuple[int, bytes, bytes]]],
                 lifespan: int = 3600, clock: Callable[[], float] = time.time):
        """``run(argv)`` gives ``(returncode, stdout, stderr)`` of a command run as the
        daemon (e.g. :meth:`slurm_adapter.cli.SlurmCli.run_plain`)."""
        self._run = run
        self._cache = _Cache(lifespan, clock)
        self._locks: dict[str, asyncio.Lock] = {}

    async def token(self, user: str) -> str:
        cached = self._cache.get(user)
        if cached is not None:
            return cached
        lock = self._locks.setdefault(user, asyncio.Lock())
        async with lock:
            cached = self._cache.get(user)
            if cached is not None:
                return cached
            issued = self._cache.clock()
            rc, out, err = await self._run(
                ["scontrol", "token", f"username={user}", f"lifespan={self._cache.lifespan}"]
            )
            text = out.decode(errors="replace")
            for line in text.splitlines():
                if line.startswith("SLURM_JWT="):
                    token = line.split("=", 1)[1].strip()
                    self._cache.put(user, token, issued)
                    return token
            why = err.decode(errors="replace").strip()
            raise BackendUnavailable(f"scontrol token username={user} failed (exit {rc}): "
                                     f"{why or text.strip() or 'no token printed'}")

    def invalidate(self, user: str) -> None:
        self._cache.drop(user)


@dataclass(frozen=True)
class _Answer:
    status: int
    body: dict[str, Any] | None
    text: str


class SlurmRestClient:
    """slurmrestd for one dialect. Give ``socket_path`` (UNIX socket) or ``url``."""

    def __init__(self, dialect: Dialect, tokens: TokenSource, *,
                 socket_path: str | None = None, url: str | None = None,
                 timeout: float = 10.0):
        if (socket_path is None) == (url is None):
            raise ValueError("give exactly one of socket_path and url")
        self.dialect = dialect
        self.tokens = tokens
        self.socket_path = socket_path
        self.base_url = (url or "http://localhost").rstrip("/")
        self.timeout = timeout
        self._session: httpx.AsyncClient | None = None

    @property
    def where(self) -> str:
        return f"unix:{self.socket_path}" if self.socket_path else self.base_url

    def _http(self) -> httpx.AsyncClient:
        if self._session is None or self._session.is_closed:
            transport = httpx.AsyncHTTPTransport(uds=self.socket_path)
            self._session = httpx.AsyncClient(transport=transport,
                                              timeout=httpx.Timeout(self.timeout))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.aclose()
            self._session = None

    async def _request(self, method: str, path: str, user: str,
                       body: dict[str, Any] | None = None, *,
                       versioned: bool = True,
                       decode: Callable[[bytes], tuple[str, Any]] = _decode) -> _Answer:
        """One HTTP exchange as ``user`` (``path`` below the dialect's prefix unless
        ``versioned`` is false), its answer decoded by ``decode``; transport failures ->
        BackendUnavailable."""
        token = await self.tokens.token(user)
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token,
                   "Accept": "application/json"}
        url = self.base_url + (self.dialect.prefix if versioned else "") + path
        try:
            # Streamed and joined here, not resp.content: httpx's response and its stream
            # refer to each other, so the response lives until the cyclic GC finds it, and
            # with it the body it kept (a whole listing: 20 MB at 6,000 jobs, which held
            # the daemon's memory ~18 MB up for minutes after each one).
            async with self._http().stream(method, url, headers=headers, json=body) as resp:
                status = resp.status_code
                content = b"".join([part async for part in resp.aiter_bytes()])
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise BackendUnavailable(f"slurmrestd at {self.where} did not answer "
                                     f"{method} {path} within {self.timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"slurmrestd at {self.where} unreachable: "
                                     f"{exc or type(exc).__name__}") from exc
        except OSError as exc:
            raise BackendUnavailable(f"slurmrestd at {self.where} unreachable: {exc}") from exc
        # A busy cluster's job listing is megabytes (24 MB for 7,500 jobs on 22.05):
        # decoded in a worker thread, not on the daemon's event loop.
        if len(content) > OFF_LOOP_BYTES:
            text, parsed = await asyncio.to_thread(decode, content)
        else:
            text, parsed = decode(content)
        del content
        answer = _Answer(status, parsed if isinstance(parsed, dict) else None, text)
        if status in (401, 403):
            self.tokens.invalidate(user)
            raise BackendUnavailable(f"slurmrestd at {self.where} refused the credentials of "
                                     f"{user!r} (HTTP {status}: {text.strip()[:200]})")
        if answer.body is None and status != 304:  # 304: "not modified" has no body
            raise BackendUnavailable(f"slurmrestd at {self.where} answered {method} {path} with "
                                     f"HTTP {status} and no JSON: {text.strip()[:200]!r}")
        return answer

    @staticmethod
    def _errors(answer: _Answer) -> list[Any]:
        errors = (answer.body or {}).get("errors")
        return errors if isinstance(errors, list) else []

    async def submit(self, user: str, script: str, job: dict[str, Any]) -> str:
        """Submit as ``user``; the new Slurm job id.

        Success is an answer carrying a ``job_id``, even with ``errors`` beside it
        (Slurm 22.05 does that for a job it queued but cannot start yet, e.g.
        "Requested partition configuration not available now"); those are logged.
        """
        answer = await self._request("POST", "/job/submit", user,
                                     self.dialect.submit_body(script, job))
        assert answer.body is not None
        job_id = answer.body.get("job_id")
        errors = self._errors(answer)
        if isinstance(job_id, int) and not isinstance(job_id, bool) and job_id > 0:
            for code, message in error_messages(errors):
                log.warning("slurmrestd accepted job %s with a warning (%s): %s",
                            job_id, code, message)
            return str(job_id)
        if not errors and answer.status >= 500:
            raise BackendUnavailable(f"slurmrestd at {self.where}: HTTP {answer.status} "
                                     f"without a job id")
        raise classify(errors or [{"error": f"HTTP {answer.status} without a job id"}],
                       context="Slurm refused the job")

    async def openapi(self, user: str) -> dict[str, Any]:
        """slurmrestd's OpenAPI document (``GET /openapi/v3`` as ``user``): which
        ``/slurm/vX`` versions it serves (:func:`slurm_adapter.dialects.served_versions`)."""
        answer = await self._request("GET", "/openapi/v3", user, versioned=False)
        if answer.status != 200 or answer.body is None:
            raise BackendUnavailable(f"slurmrestd at {self.where}: GET /openapi/v3 answered "
                                     f"HTTP {answer.status}")
        return answer.body

    async def ping(self, user: str) -> None:
        """``GET /ping`` as ``user``; :class:`BackendUnavailable` unless slurmctld answers."""
        answer = await self._request("GET", "/ping", user)
        errors = self._errors(answer)
        if answer.status != 200 or errors:
            raise classify(errors or [{"error": f"HTTP {answer.status}"}],
                           context=f"slurmrestd at {self.where} cannot reach slurmctld",
                           read=True)

    async def jobs(self, user: str, *, changed_since: int | None = None
                   ) -> dict[str, Any] | None:
        """``GET /jobs`` as ``user``: the answer (``meta``, ``jobs``), each job as the
        :class:`~slurm_adapter.listing.JobFields` the bridge reads.

        With ``changed_since`` (epoch seconds) slurmctld sends no jobs when none changed
        since then (its ``update_time`` filter is all-or-nothing): that gives ``None``,
        and the caller's last listing still holds. v0.0.38 (22.05) says so with HTTP
        304; v0.0.40+ (24.11, 26.05) with HTTP 200, an empty ``jobs`` list and
        ``last_update`` 0 (a real listing carries the controller's time there). The
        listing is megabytes on a busy cluster; this keeps a quiet one from reparsing it."""
        path = "/jobs" if changed_since is None else f"/jobs?update_time={changed_since}"
        answer = await self._request("GET", path, user, decode=_decode_listing)
        if answer.status == 304:
            return None
        assert answer.body is not None
        if (changed_since is not None and answer.status == 200
                and answer.body.get("jobs") == [] and "last_update" in answer.body
                and self.dialect.number(answer.body["last_update"]) in (0, None)):
            return None
        if answer.status == 200 and isinstance(answer.body.get("jobs"), list):
            return answer.body
        raise classify(self._errors(answer) or [{"error": f"HTTP {answer.status}"}],
                       context=f"slurmrestd cannot list jobs (HTTP {answer.status})", read=True)

    async def job(self, user: str, job_id: int) -> Any | None:
        """``GET /job/{id}`` as ``user``: the record of Slurm job ``job_id`` (a
        :class:`~slurm_adapter.listing.JobFields`, as the listing's), or None when Slurm
        no longer holds it ("Invalid job id specified"). The base id of an array
        answers every record of the array; the one whose own ``job_id`` it is counts."""
        answer = await self._request("GET", f"/job/{int(job_id)}", user,
                                     decode=_decode_listing)
        errors = self._errors(answer)
        items = error_messages(errors)
        if items and all(code == INVALID_JOB_ID for code, _ in items):
            return None
        jobs = (answer.body or {}).get("jobs")
        if answer.status == 200 and not errors and isinstance(jobs, list):
            for raw in jobs:
                if hasattr(raw, "get") and self.dialect.number(raw.get("job_id")) == job_id:
                    return raw
            return None
        raise classify(errors or [{"error": f"HTTP {answer.status}"}],
                       context=f"slurmrestd cannot read job {job_id} (HTTP {answer.status})",
                       read=True)

    async def nodes(self, user: str) -> dict[str, Any]:
        """``GET /nodes`` as ``user``: the whole answer (``meta``, ``nodes``)."""
        answer = await self._request("GET", "/nodes", user)
        assert answer.body is not None
        if answer.status == 200 and isinstance(answer.body.get("nodes"), list):
            return answer.body
        raise classify(self._errors(answer) or [{"error": f"HTTP {answer.status}"}],
                       context=f"slurmrestd cannot list nodes (HTTP {answer.status})", read=True)

    async def cancel(self, user: str, job_id: str) -> None:
        """``DELETE /job/{id}`` as ``user``. An unknown or finished job is no error."""
        if not is_slurm_id(job_id):
            raise BackendRejected(f"not a Slurm job id: {job_id!r}")
        answer = await self._request("DELETE", f"/job/{job_id}", user)
        errors = self._errors(answer)
        if answer.status == 200 and not errors:
            return
        items = error_messages(errors)
        if items and all(code in CANCEL_NOOP_ERRORS for code, _ in items):
            return
        if not errors:
            if answer.status < 400:
                return
            raise BackendUnavailable(f"slurmrestd at {self.where}: HTTP {answer.status} "
                                     f"cancelling job {job_id}")
        raise classify(errors, context=f"Slurm refused to cancel job {job_id}")

