"""The unix socket's door: a user over the request rate is refused at ``accept``.

A flood of small requests costs the daemon little per request, but every request
that reaches aiohttp costs a task, an HTTP parse and a response built in Python.
:class:`GatedUnixSite` checks the caller's request rate (``limits.request_rate``,
:meth:`bridge.limits.UserLimits.check_request`) when the connection is accepted,
from the kernel's peer credentials, before any of that: an over-rate connection
gets a canned ``429`` (with ``Retry-After`` and the message naming the setting) and
is closed. A connection let in has paid for its first request; the API's middleware
charges only the requests after it on the same connection (:func:`prepaid`).

TCP connections (token users) are not gated here: their identity is known only
once the request is read; the middleware charges them.
"""

from __future__ import annotations

import asyncio
import json
import pwd
import socket
import struct
import weakref
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web

from bridge.limits import LimitExceeded, UserLimits

__all__ = ["GatedUnixSite", "prepaid"]

#: Transports whose first request was charged at accept (weak: a closed one goes).
_PREPAID: weakref.WeakSet[Any] = weakref.WeakSet()
_NAMES: dict[int, str] = {}


def prepaid(transport: object) -> bool:
    """Whether ``transport``'s first request was charged at accept; True only once."""
    if transport in _PREPAID:
        _PREPAID.discard(transport)
        return True
    return False


def _user(uid: int) -> str:
    name = _NAMES.get(uid)
    if name is None:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = f"uid {uid}"
        if len(_NAMES) < 65536:
            _NAMES[uid] = name
    return name


def refusal_bytes(exc: LimitExceeded) -> bytes:
    """The whole HTTP answer to a connection refused at accept."""
    body = json.dumps({"error": str(exc), "limit": exc.limit}).encode()
    head = (f"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; "
            f"charset=utf-8\r\nContent-Length: {len(body)}\r\nRetry-After: "
            f"{exc.retry_after}\r\nConnection: close\r\n\r\n").encode()
    return head + body


#: A refused connection is closed when its client closes, after this long, or once
#: more than :data:`REFUSED_DRAIN_BYTES` of its request have come (read and dropped,
#: so that a client still writing a small request reads the answer, not EPIPE).
REFUSED_LINGER_SECONDS = 2.0
REFUSED_DRAIN_BYTES = 64 * 1024


class _Gate(asyncio.Protocol):
    """Accepts or refuses one connection, then hands it to aiohttp's handler.

    A refused connection is answered at once and half-closed; what the client still
    sends is dropped until it closes (see :data:`REFUSED_LINGER_SECONDS`)."""

    def __init__(self, make_handler: Callable[[], asyncio.Protocol], limits: UserLimits):
        self._make_handler = make_handler
        self._limits = limits
        self._refused: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._dropped = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        uid: int | None = None
        if sock is not None:
            try:
                raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                      struct.calcsize("3i"))
                uid = struct.unpack("3i", raw)[1]
            except OSError:
                uid = None
        if uid is not None:
            try:
                self._limits.check_request(uid, _user(uid))
            except LimitExceeded as exc:
                # A stream transport, though uvloop's classes do not derive from
                # asyncio.Transport (an isinstance assert refused every connection).
                stream = cast(asyncio.Transport, transport)
                self._refused = stream
                stream.write(refusal_bytes(exc))
                if stream.can_write_eof():
                    stream.write_eof()
                self._timer = asyncio.get_running_loop().call_later(
                    REFUSED_LINGER_SECONDS, stream.close)
                return
            _PREPAID.add(transport)
        handler = self._make_handler()
        transport.set_protocol(handler)
        handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._refused is not None:  # the refused request: dropped
            self._dropped += len(data)
            if self._dropped > REFUSED_DRAIN_BYTES:
                self._refused.close()

    def eof_received(self) -> bool | None:
        return None  # close

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()


class GatedUnixSite(web.UnixSite):
    """:class:`aiohttp.web.UnixSite` whose connections pass :class:`_Gate` first."""

    def __init__(self, runner: web.AppRunner, path: str, limits: UserLimits,
                 backlog: int = 128):
        super().__init__(runner, path, backlog=backlog)
        self._limits = limits

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: _Gate(server, self._limits), self._path, backlog=self._backlog)


class GatedSockSite(web.SockSite):
    """:class:`aiohttp.web.SockSite` (a listening unix socket passed by systemd) whose
    connections pass :class:`_Gate` first, as :class:`GatedUnixSite`'s do."""

    def __init__(self, runner: web.AppRunner, sock: socket.socket, limits: UserLimits,
                 backlog: int = 128):
        super().__init__(runner, sock, backlog=backlog)
        self._limits = limits

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: _Gate(server, self._limits), sock=self._sock, backlog=self._backlog)
