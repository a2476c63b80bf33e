"""A small synchronous client of the daemon's HTTP API (what ``tbatch`` & co. use).

Where the daemon is, from the environment (:meth:`BridgeClient.from_env`):

* ``HPC_BRIDGE_URL`` set: TCP (``http(s)://host:port``), authenticated with the bearer
  token in ``HPC_BRIDGE_TOKEN``;
* otherwise the unix socket ``HPC_BRIDGE_SOCKET`` (default
  ``/run/hpc-bridge/bridge.sock``), where the daemon knows the caller from the kernel
  (peer credentials) and no token is sent.

API (JSON unless stated; errors are ``{"error": message}``):

* ``POST /v1/jobs`` (a TrainJob document) -> 201 ``{id, uid, name, state}``
* ``GET /v1/jobs?states=A,B|all&user=U`` -> ``{"items": [JobView]}``; no ``states``:
  only jobs not finished
* ``GET /v1/jobs/{ref}`` -> JobView with ``transitions``
* ``POST /v1/jobs/{ref}/cancel`` -> 202 JobView (403 not the owner, 404 unknown)
* ``GET /v1/jobs/{ref}/log?stream=stdout|stderr&offset=N&follow=0|1`` -> raw bytes,
  streamed; with ``follow=1`` until the job has finished and its output is drained.

Contract: every failure (daemon unreachable, HTTP error, garbage answer) raises
:class:`BridgeClientError` with a message fit for a user and the HTTP status (``None``
when there was no HTTP answer). Nothing else escapes, except errors raised by the
caller's own code while it consumes :meth:`BridgeClient.stream_log`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypedDict, cast
from urllib.parse import quote

import httpx

from bridge.model import TrainJob

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

DEFAULT_SOCKET = "/run/hpc-bridge/bridge.sock"
ENV_SOCKET = "HPC_BRIDGE_SOCKET"
ENV_URL = "HPC_BRIDGE_URL"
ENV_TOKEN = "HPC_BRIDGE_TOKEN"  # noqa: S105 -- the name of a variable, not a secret
_USER_AGENT = "hpc-bridge-client/1"
_MAX_ERROR_TEXT = 2000


class BridgeClientError(Exception):
    """A failed call: ``message`` for the user, ``status`` the HTTP status (or ``None``)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


Transition = TypedDict(
    "Transition",
    {"from": str | None, "to": str, "reason": str | None, "message": str | None, "at": str | None},
    total=False,
)


class JobView(TypedDict, total=False):
    """A job as the API shows it (times are RFC 3339 strings or ``None``)."""

    id: int
    uid: str
    name: str
    namespace: str
    jobName: str
    user: str
    unixUid: int
    backend: str | None
    backendId: str | None
    state: str
    reason: str | None
    message: str | None
    runtime: str
    numNodes: int
    nodes: list[str] | None
    exitCode: int | None
    partition: str | None
    timeLimitMinutes: int | None
    submitTime: str | None
    startTime: str | None
    endTime: str | None
    stdout: str | None
    stderr: str | None
    trainJob: dict[str, Any]
    transitions: list[Transition]


@dataclass(frozen=True)
class SubmitResult:
    """The daemon's answer to a submission."""

    id: int
    uid: str
    name: str
    state: str


def _ref(ref: str | int) -> str:
    """A job reference as one URL path segment (never a ``..`` or a ``/``)."""
    text = str(ref)
    if text in ("", ".", ".."):
        raise BridgeClientError(f"invalid job reference {text!r}")
    return quote(text, safe="")


class BridgeClient:
    """Synchronous API client; use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        *,
        socket_path: str | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Talk to ``url`` (TCP, with ``token``) or else to the unix socket ``socket_path``.

        ``transport`` replaces the network (tests).
        """
        headers = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        self._timeout = timeout
        if url:
            self.where = url
            self._hint = ENV_URL
            base = url.rstrip("/")
            if token:
                headers["Authorization"] = f"Bearer {token}"
            transport = transport or httpx.HTTPTransport()
        else:
            path = socket_path or DEFAULT_SOCKET
            self.where = path
            self._hint = ENV_SOCKET
            base = "http://hpc-bridge"
            transport = transport or httpx.HTTPTransport(uds=path)
        try:
            self._http = httpx.Client(
                base_url=base, transport=transport, headers=headers, timeout=timeout
            )
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise BridgeClientError(
                f"invalid address {self.where!r} ({self._hint}): {exc}"
            ) from None

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, timeout: float = 30.0
    ) -> BridgeClient:
        """A client configured from ``HPC_BRIDGE_URL``/``_TOKEN`` or ``HPC_BRIDGE_SOCKET``."""
        env = os.environ if environ is None else environ
        url = env.get(ENV_URL) or None
        if url:
            return cls(url=url, token=env.get(ENV_TOKEN) or None, timeout=timeout)
        return cls(socket_path=env.get(ENV_SOCKET) or DEFAULT_SOCKET, timeout=timeout)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

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

    def _transport_error(self, exc: Exception) -> BridgeClientError:
        if isinstance(exc, httpx.TimeoutException):
            return BridgeClientError(
                f"hpc-bridge at {self.where} did not answer within {self._timeout:g} s"
            )
        if isinstance(exc, httpx.ConnectError):
            if self._hint == ENV_SOCKET and "Permission denied" in str(exc):
                return BridgeClientError(
                    f"cannot reach hpc-bridge at {self.where}: permission denied"
                )
            detail = f" [{exc}]" if self._hint == ENV_URL else ""
            return BridgeClientError(
                f"cannot reach hpc-bridge at {self.where}: is the daemon running? "
                f"(set {self._hint}){detail}"
            )
        return BridgeClientError(f"connection to hpc-bridge at {self.where} failed: {exc}")

    @staticmethod
    def _http_error(response: httpx.Response) -> BridgeClientError:
        status = response.status_code
        message = ""
        try:
            body = response.json()
            if isinstance(body, dict) and isinstance(body.get("error"), str):
                message = body["error"]
        except ValueError:
            pass
        if not message:
            message = response.text.strip()[:_MAX_ERROR_TEXT] or response.reason_phrase
        if status == 401:
            message += f" (set {ENV_TOKEN})"
        return BridgeClientError(message or f"HTTP {status}", status)

    def _call(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None
    ) -> Any:
        try:
            response = self._http.request(method, path, params=params, json=body)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        if response.status_code >= 400:
            raise self._http_error(response)
        try:
            return response.json()
        except ValueError:
            raise BridgeClientError(
                f"hpc-bridge sent an answer that is not JSON (HTTP {response.status_code})",
                response.status_code,
            ) from None

    @staticmethod
    def _object(data: Any, what: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise BridgeClientError(f"hpc-bridge sent an unexpected {what}")
        return data

    # ----------------------------------------------------------------------- API

    def submit(self, job: TrainJob | Mapping[str, Any]) -> SubmitResult:
        """Submit a TrainJob (model or camelCase document)."""
        document = job.to_dict() if isinstance(job, TrainJob) else dict(job)
        data = self._object(self._call("POST", "/v1/jobs", body=document), "submit answer")
        try:
            return SubmitResult(
                id=int(data["id"]),
                uid=str(data["uid"]),
                name=str(data["name"]),
                state=str(data["state"]),
            )
        except (KeyError, TypeError, ValueError):
            raise BridgeClientError(
                f"hpc-bridge sent an unexpected submit answer: {json.dumps(data)[:200]}"
            ) from None

    def list_jobs(
        self,
        *,
        states: Sequence[str] | None = None,
        all_states: bool = False,
        user: str | None = None,
    ) -> list[JobView]:
        """Jobs, by state (default: those not finished; ``all_states``: every job)."""
        params: dict[str, str] = {}
        if all_states:
            params["states"] = "all"
        elif states:
            params["states"] = ",".join(states)
        if user:
            params["user"] = user
        data = self._object(self._call("GET", "/v1/jobs", params=params), "job list")
        items = data.get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise BridgeClientError("hpc-bridge sent an unexpected job list")
        return cast(list[JobView], items)

    def get_job(self, ref: str | int) -> JobView:
        """One job, with its state transitions."""
        return cast(JobView, self._object(self._call("GET", f"/v1/jobs/{_ref(ref)}"), "job"))

    def cancel(self, ref: str | int) -> JobView:
        """Ask for the job to be cancelled; returns it as it is now."""
        path = f"/v1/jobs/{_ref(ref)}/cancel"
        return cast(JobView, self._object(self._call("POST", path), "job"))

    def stream_log(
        self, ref: str | int, *, stream: str = "stdout", offset: int = 0, follow: bool = False
    ) -> Iterator[bytes]:
        """The job's output from byte ``offset`` on, in chunks as they arrive.

        With ``follow`` the iterator ends when the job has finished and its output is
        drained (no read timeout applies then).
        """
        params = {"stream": stream, "offset": str(offset), "follow": "1" if follow else "0"}
        timeout = httpx.Timeout(self._timeout, read=None) if follow else self._timeout
        try:
            with self._http.stream(
                "GET", f"/v1/jobs/{_ref(ref)}/log", params=params, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._http_error(response)
                yield from response.iter_bytes()
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
