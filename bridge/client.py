"""A small synchronous client of the daemon's HTTP API (what ``tbatch`` & co. use).

Where the daemon is, from the environment (:meth:`BridgeClient.from_env`):

* ``HPC_BRIDGE_URL`` set: TCP (``http(s)://host:port``), authenticated with the bearer
  token in ``HPC_BRIDGE_TOKEN``;
* otherwise the unix socket ``HPC_BRIDGE_SOCKET`` (default
  ``/run/hpc-bridge/bridge.sock``), where the daemon knows the caller from the kernel
  (peer credentials) and no token is sent.

API (JSON unless stated; errors are ``{"error": message}``):

* ``POST /v1/jobs`` (a TrainJob document, ``Idempotency-Key`` header) -> 201
  ``{id, uid, name, state}``; 200 with the same job for a retry with the same key
* ``POST /v1/sbatch`` (what tbatch was given: arguments, script, cwd, environment) ->
  as ``POST /v1/jobs``, plus ``parsable``
* ``GET /v1/jobs?states=A,B|all&user=U&limit=N&continue=T`` -> one page
  ``{"items": [JobView], "metadata": {"continue": T}}`` (no ``trainJob`` in a listing);
  no ``states``: only jobs not finished; :meth:`BridgeClient.iter_jobs` follows the pages
* ``GET /v1/jobs/{ref}`` -> JobView with ``trainJob`` and ``transitions``
* ``POST /v1/jobs/{ref}/cancel`` -> 202 JobView (403 not the owner, 404 unknown)
* ``GET /v1/jobs/{ref}/log?stream=stdout|stderr&offset=N&follow=0|1`` -> raw bytes,
  streamed; with ``follow=1`` until the job has finished and its output is drained.
* ``GET /v1/events?since=SEQ&timeout=S`` -> ``{"items": [event], "next": SEQ}``
  (long-poll; the caller's jobs' events, every job's for root)

A 429 (a per-user limit of the daemon) is asked again after its ``Retry-After`` when
that is at most ``max_busy_wait`` seconds, at most ``busy_retries`` times (the daemon did
nothing with a refused request, so asking again is safe); then, or when it asks for a
longer wait (too many unfinished jobs), the daemon's message is raised.

Contract: every failure (daemon unreachable, HTTP error, garbage answer) raises
:class:`BridgeClientError` with a message fit for a user and the HTTP status (``None``
when there was no HTTP answer). Nothing else escapes, except errors raised by the
caller's own code while it consumes :meth:`BridgeClient.stream_log`.

Why no HTTP client package, and not even ``http.client``: this module is what
``tqueue``/``tbatch``/... import, commands that users and their scripts start hundreds
of times a day (``watch tqueue``, loops of ``tbatch``) and that should start about as
fast as ``squeue``. Importing httpx alone took ~130 ms (``httpx._main`` pulls in rich
and click when they are installed); ``http.client`` ~18 ms of a ~25 ms interpreter
start (``email.parser``, ``ssl``). :mod:`bridge.http11` does the little the client
needs: one request per connection, JSON bodies, a socket timeout, chunked streaming,
TLS only for ``https://``. The daemon side keeps aiohttp. Keep this module's imports
light (the model, pydantic, only for type checking).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from urllib.parse import quote, urlencode, urlsplit

from bridge.client_env import (
    DEFAULT_SOCKET,
    DEFAULT_TIMEOUT,
    ENV_SOCKET,
    ENV_TOKEN,
    ENV_URL,
    IDEMPOTENCY_HEADER,
    USER_AGENT,
)
from bridge.client_errors import BridgeClientError
from bridge.client_listing import READ_CHUNK, ListingCalls
from bridge.client_types import JobView, SubmitResult, Transition
from bridge.http11 import Connection, ProtocolError, Response, tls_socket

#: typing (and what only annotations need) costs every command ~2 ms of start-up
#: (bridge.client_types).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import TracebackType
    from typing import Any

    from bridge.model import TrainJob

    #: An answer already read: its head and its whole body.
    Answer = tuple[Response, bytes]

__all__ = [
    "DEFAULT_SOCKET",
    "ENV_SOCKET",
    "ENV_TOKEN",
    "ENV_URL",
    "BridgeClient",
    "BridgeClientError",
    "JobView",
    "SubmitResult",
    "Transition",
]

#: A submission is sent at most this many times (the same key each time) ...
SUBMIT_ATTEMPTS = 3
#: ... waiting this many seconds times the attempt number between two.
SUBMIT_RETRY_DELAY = 1.0
_MAX_ERROR_TEXT = 2000


def _ref(ref: str | int) -> str:
    """A job reference as one URL path segment (never a ``..`` or a ``/``)."""
    text = str(ref)
    if text in ("", ".", ".."):
        raise BridgeClientError(f"invalid job reference {text!r}")
    return quote(text, safe="")


def _retry_after(response: Response) -> float | None:
    """A ``Retry-After`` in seconds (the HTTP-date form is not used by the daemon)."""
    value = response.getheader("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 86400 else None


def _header_safe(value: str) -> bool:
    """Whether ``value`` can go into an HTTP header as it is (printable ASCII)."""
    return value.isascii() and value.isprintable()


def _unix_socket(path: str, timeout: float) -> socket.socket:
    """A connection to the daemon's unix socket; while its listen queue is full
    (``EAGAIN``: it is busy), try again with a growing pause until ``timeout`` has
    passed (then ``TimeoutError``)."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except BlockingIOError:
            sock.close()
            if time.monotonic() + pause > deadline:
                raise TimeoutError("the daemon's listen queue stayed full") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
            continue
        except BaseException:
            sock.close()
            raise
        return sock


def _tcp_socket(host: str, port: int, tls: bool, timeout: float) -> socket.socket:
    """A TCP connection to ``host:port`` (TLS when ``tls``)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    if not tls:
        return sock
    try:
        return tls_socket(sock, host)
    except BaseException:
        sock.close()
        raise


class BridgeClient(ListingCalls):
    """Synchronous API client; use as a context manager or call :meth:`close`.

    Every call opens its own connection and closes it when the answer has been read
    (a command makes one call, or a few; nothing is left open between calls, except
    the one page :meth:`iter_pages` may be reading ahead).
    """

    def __init__(
        self,
        *,
        socket_path: str | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        busy_retries: int = 3,
        max_busy_wait: float = 10.0,
    ) -> None:
        """Talk to ``url`` (TCP, with ``token``) or else to the unix socket ``socket_path``.

        ``timeout`` (seconds) bounds connecting and every wait for the daemon, except
        while following a log (:meth:`stream_log` with ``follow``). A 429 is asked again
        up to ``busy_retries`` times when its ``Retry-After`` is at most
        ``max_busy_wait`` seconds.
        """
        self._timeout = timeout
        self._busy_retries = busy_retries
        self._max_busy_wait = max_busy_wait
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        self._prefix = ""
        self._new_connection: Callable[[], Connection]
        if url:
            self.where = url
            self._hint = ENV_URL
            self._new_connection = self._tcp(url)
            if token:
                if not _header_safe(token):
                    raise BridgeClientError(
                        f"invalid token in {ENV_TOKEN}: it must be printable ASCII"
                    )
                self._headers["Authorization"] = f"Bearer {token}"
        else:
            path = socket_path or DEFAULT_SOCKET
            self.where = path
            self._hint = ENV_SOCKET
            if "\0" in path:
                raise self._invalid("the path contains a NUL byte")
            self._new_connection = lambda: Connection(lambda: _unix_socket(path, timeout),
                                                      "hpc-bridge")

    def _invalid(self, why: object) -> BridgeClientError:
        return BridgeClientError(f"invalid address {self.where!r} ({self._hint}): {why}")

    def _tcp(self, url: str) -> Callable[[], Connection]:
        """Connections to ``http(s)://host[:port][/prefix]`` (the prefix goes before
        every API path)."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise self._invalid(exc) from None
        scheme = parts.scheme.lower()
        host = parts.hostname
        if scheme not in ("http", "https"):
            raise self._invalid("the URL must start with http:// or https://")
        if not host:
            raise self._invalid("no host name")
        self._prefix = quote(parts.path.rstrip("/"), safe="/%")
        timeout = self._timeout
        tls = scheme == "https"
        address = (host, port or (443 if tls else 80))
        host_header = parts.netloc.rpartition("@")[2]
        return lambda: Connection(lambda: _tcp_socket(*address, tls, timeout), host_header)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> BridgeClient:
        """A client configured from ``HPC_BRIDGE_URL``/``_TOKEN`` or ``HPC_BRIDGE_SOCKET``."""
        env = os.environ if environ is None else environ
        url = env.get(ENV_URL) or None
        if url:
            return cls(url=url, token=env.get(ENV_TOKEN) or None, timeout=timeout)
        return cls(socket_path=env.get(ENV_SOCKET) or DEFAULT_SOCKET, timeout=timeout)

    def close(self) -> None:
        """Release the client (no connection outlives a call, so there is nothing to do)."""

    def __enter__(self) -> BridgeClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _timed_out(self) -> BridgeClientError:
        return BridgeClientError(
            f"hpc-bridge at {self.where} did not answer within {self._timeout:g} s",
            transient=True,
        )

    def _connect_error(self, exc: OSError) -> BridgeClientError:
        """No connection (no daemon, refused, no such host, TLS failure, ...)."""
        if isinstance(exc, TimeoutError):
            return self._timed_out()
        if self._hint == ENV_SOCKET and isinstance(exc, PermissionError):
            return BridgeClientError(f"cannot reach hpc-bridge at {self.where}: permission denied")
        detail = f" [{exc}]" if self._hint == ENV_URL else ""
        return BridgeClientError(
            f"cannot reach hpc-bridge at {self.where}: is the daemon running? "
            f"(set {self._hint}){detail}",
            transient=True,
        )

    def transport_error(self, exc: OSError | ProtocolError) -> BridgeClientError:
        """A failure once connected (timeout, connection reset, answer cut short)."""
        if isinstance(exc, TimeoutError):
            return self._timed_out()
        detail = str(exc) or type(exc).__name__
        return BridgeClientError(f"connection to hpc-bridge at {self.where} failed: {detail}",
                                 transient=True)

    @staticmethod
    def _http_error(response: Response, data: bytes) -> BridgeClientError:
        status = response.status
        message = ""
        try:
            body = json.loads(data)
            if isinstance(body, dict) and isinstance(body.get("error"), str):
                message = body["error"]
        except ValueError:
            pass
        if not message:
            message = data.decode("utf-8", "replace").strip()[:_MAX_ERROR_TEXT] or response.reason
        if status == 401:
            message += f" (set {ENV_TOKEN})"
        return BridgeClientError(message or f"HTTP {status}", status,
                                 retry_after=_retry_after(response) if status == 429 else None)

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        read_timeout: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[Connection, Response]:
        """Send one request and read the answer's head; the caller reads the body and
        closes the connection. ``read_timeout=False``: wait for the daemon forever."""
        target = self._prefix + path
        if params:
            target += "?" + urlencode(params)
        headers = {**self._headers, **(headers or {})}
        payload = None
        if body is not None:
            # ASCII JSON: a string with lone surrogates (os.environ's way of keeping
            # bytes that are not UTF-8) is escaped instead of failing to encode.
            payload = json.dumps(body, separators=(",", ":")).encode("ascii")
            headers["Content-Type"] = "application/json"
        connection = self._new_connection()
        try:
            try:
                connection.connect()
            except OSError as exc:
                raise self._connect_error(exc) from None
            try:
                try:
                    connection.request(method, target, body=payload, headers=headers)
                except (BrokenPipeError, ConnectionResetError):
                    # The daemon answered before reading the whole body (413 too large,
                    # 429 at the socket's accept) and closed: its answer is there to read.
                    if connection.sock is None:
                        raise
                if not read_timeout and connection.sock is not None:
                    connection.sock.settimeout(None)
                return connection, connection.getresponse()
            except (OSError, ProtocolError) as exc:
                raise self.transport_error(exc) from None
        except BaseException:
            connection.close()
            raise

    def _read(self, response: Response) -> bytes:
        try:
            return response.read()
        except (OSError, ProtocolError) as exc:
            raise self.transport_error(exc) from None

    def _call(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None,
        body: Any = None, headers: Mapping[str, str] | None = None,
        answered: Answer | None = None,
    ) -> Any:
        """The JSON of the daemon's answer to one request (a 429 asked again after its
        ``Retry-After``); ``answered``: the whole answer to this request, already sent
        once by a quick path (:mod:`bridge.cli.quick`), read as if it had come here."""
        retries = self._busy_retries
        while True:
            if answered is not None:
                response, data = answered
                answered = None
            else:
                connection, response = self._request(method, path, params=params, body=body,
                                                     headers=headers)
                try:
                    data = self._read(response)
                finally:
                    connection.close()
            if response.status < 400:
                break
            error = self._http_error(response, data)
            wait = error.retry_after
            if error.status != 429 or wait is None or wait > self._max_busy_wait or retries <= 0:
                raise error
            retries -= 1
            time.sleep(wait)
        try:
            return json.loads(data)
        except ValueError:
            raise BridgeClientError(
                f"hpc-bridge sent an answer that is not JSON (HTTP {response.status})",
                response.status,
            ) from None

    @staticmethod
    def _object(data: Any, what: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise BridgeClientError(f"hpc-bridge sent an unexpected {what}")
        return data

    # ----------------------------------------------------------------------- API

    @classmethod
    def _job(cls, data: Any) -> JobView:
        """``data`` as a job view (an object, else :class:`BridgeClientError`)."""
        job: Any = cls._object(data, "job")
        return job  # type: ignore[no-any-return]  # (typing.cast: see TYPE_CHECKING)

    def submit(self, job: TrainJob | Mapping[str, Any], *,
               idempotency_key: str | None = None) -> SubmitResult:
        """Submit a TrainJob (model or camelCase document) once (``POST /v1/jobs``).

        The request carries an ``Idempotency-Key`` (``idempotency_key``, or a fresh
        random one per call); when no answer comes (timeout, connection refused or
        reset) it is sent again with the same key, up to :data:`SUBMIT_ATTEMPTS` times,
        and the daemon answers a repeat with the job the first one made: a submission
        that timed out after it was admitted is never made twice."""
        # A Mapping check, not isinstance(job, TrainJob): importing the model (pydantic)
        # would double the start-up time of the commands that never submit.
        document = dict(job) if isinstance(job, Mapping) else job.to_dict()
        return self._submit("/v1/jobs", document, idempotency_key)

    def submit_sbatch(self, request: Mapping[str, Any], *,
                      idempotency_key: str | None = None,
                      answered: Answer | None = None) -> SubmitResult:
        """Submit what ``tbatch`` was given (``POST /v1/sbatch``; the fields are those
        of :mod:`bridge.sbatch.submission`): the daemon parses it as sbatch would, and
        its 400 names the option and ``#SBATCH`` line. Sent once, as :meth:`submit`;
        ``answered``: the daemon's whole answer to this request sent once already under
        ``idempotency_key`` (then it is sent again only where a first answer here would
        be: a 429 after its ``Retry-After``)."""
        return self._submit("/v1/sbatch", dict(request), idempotency_key, answered)

    def _submit(self, path: str, document: dict[str, Any],
                idempotency_key: str | None, answered: Answer | None = None) -> SubmitResult:
        headers = {IDEMPOTENCY_HEADER: idempotency_key or os.urandom(16).hex()}
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            try:
                answer = self._call("POST", path, body=document, headers=headers,
                                    answered=answered)
                break
            except BridgeClientError as exc:
                if not exc.transient or attempt == SUBMIT_ATTEMPTS:
                    raise
                answered = None
                time.sleep(SUBMIT_RETRY_DELAY * attempt)
        data = self._object(answer, "submit answer")
        if data.get("testOnly") is True and isinstance(data.get("estimate"), str):
            return SubmitResult(id=0, uid="", name="", state="", estimate=data["estimate"])
        try:
            return SubmitResult(
                id=int(data["id"]),
                uid=str(data["uid"]),
                name=str(data["name"]),
                state=str(data["state"]),
                parsable=data.get("parsable") is True,
            )
        except (KeyError, TypeError, ValueError):
            raise BridgeClientError(
                f"hpc-bridge sent an unexpected submit answer: {json.dumps(data)[:200]}"
            ) from None

    def get_job(self, ref: str | int) -> JobView:
        """One job, with its state transitions."""
        return self._job(self._call("GET", f"/v1/jobs/{_ref(ref)}"))

    def cancel(self, ref: str | int) -> JobView:
        """Ask for the job to be cancelled; returns it as it is now."""
        path = f"/v1/jobs/{_ref(ref)}/cancel"
        return self._job(self._call("POST", path))

    def control(self, ref: str | int, action: str) -> JobView:
        """``action`` (``hold``, ``release``, ``suspend``, ``resume``) on the job; returns
        it as it is now."""
        if action not in ("hold", "release", "suspend", "resume"):
            raise ValueError(f"unknown job action {action!r}")
        path = f"/v1/jobs/{_ref(ref)}/{action}"
        return self._job(self._call("POST", path))

    def events(self, *, since: int | None = None, wait: float = 20.0,
               limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """Job events after sequence number ``since`` (None: from now on), waiting up to
        ``wait`` seconds (kept below this client's timeout) for the first; returns the
        events (docs/events.md) and the ``since`` of the next call."""
        params = {"timeout": f"{max(0.0, min(wait, self._timeout - 5)):g}"}
        if since is not None:
            params["since"] = str(since)
        if limit is not None:
            params["limit"] = str(limit)
        data = self._object(self._call("GET", "/v1/events", params=params), "event list")
        items, following = data.get("items"), data.get("next")
        if (not isinstance(items, list) or not all(isinstance(i, dict) for i in items)
                or not isinstance(following, int)):
            raise BridgeClientError("hpc-bridge sent an unexpected event list")
        return items, following

    def stream_log(
        self, ref: str | int, *, stream: str = "stdout", offset: int = 0, follow: bool = False
    ) -> Iterator[bytes]:
        """The job's output from byte ``offset`` on, in chunks as they arrive.

        With ``follow`` the iterator ends when the job has finished and its output is
        drained (no read timeout applies then). An answer cut short (the daemon went
        away) raises :class:`BridgeClientError` with status ``None``.
        """
        params = {"stream": stream, "offset": str(offset), "follow": "1" if follow else "0"}
        connection, response = self._request(
            "GET", f"/v1/jobs/{_ref(ref)}/log", params=params, read_timeout=not follow
        )
        try:
            if response.status >= 400:
                raise self._http_error(response, self._read(response))
            try:
                # read1: what has arrived, at most one chunk of a chunked answer.
                while chunk := response.read1(READ_CHUNK):
                    yield chunk
            except (OSError, ProtocolError) as exc:
                raise self.transport_error(exc) from None
        finally:
            connection.close()
