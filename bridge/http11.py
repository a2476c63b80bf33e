"""The little HTTP/1.1 the t* commands speak to the daemon, over a socket they open.

Why not :mod:`http.client`: importing it costs the commands ~18 ms of a ~25 ms
interpreter start (it loads :mod:`email.parser` for headers and :mod:`ssl` even for a
unix socket), and the commands start hundreds of times a day. The daemon is the only
server they talk to, and what they need is small: one request per connection
(``Connection: close``), a JSON or empty body with a ``Content-Length``, and an answer
delimited by ``Content-Length``, chunked transfer coding, or the end of the connection.
TLS (``https://``) wraps the socket with :mod:`ssl`, imported only then.

Contract: :meth:`Connection.request` sends the request; :meth:`Connection.getresponse`
reads the answer's head and returns a :class:`Response` whose :meth:`~Response.read`
returns the whole body and :meth:`~Response.read1` what has arrived (at most one
chunk of a chunked answer; ``b""`` at the end). Socket errors propagate as
:class:`OSError` (``TimeoutError`` on a timeout); an answer that is not HTTP/1.x or
ends early raises :class:`ProtocolError`. Heads are bounded: lines of 64 KiB, 100 header
lines, 10 interim (1xx) answers; a body is not (the caller reads it as it needs).
"""

from __future__ import annotations

from io import BufferedReader, RawIOBase

from bridge.errors import BridgeError

TYPE_CHECKING = False  # typing and socket cost the commands ~4 ms of start-up
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Mapping
    from typing import Protocol

    class Socket(Protocol):
        """What a connection needs of its socket (:class:`socket.socket`, an
        :class:`ssl.SSLSocket`, or the ``_socket`` one of :mod:`bridge.cli.quick`)."""

        def sendall(self, data: bytes, /) -> None: ...
        def recv_into(self, buffer: memoryview, /) -> int: ...
        def settimeout(self, value: float | None, /) -> None: ...
        def close(self) -> None: ...

__all__ = ["Connection", "ProtocolError", "Response", "tls_socket"]

_MAX_LINE = 65536
_MAX_HEADERS = 100
#: Largest chunk of a chunked answer accepted (the daemon sends 64 KiB ones).
_MAX_CHUNK = 16 * 1024 * 1024
#: Interim (1xx) answers skipped before the real one, at most.
_MAX_INTERIM = 10
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")


class ProtocolError(BridgeError):
    """The daemon's answer is not HTTP/1.x as expected, or it ended early."""


def tls_socket(sock: socket.socket, host: str) -> socket.socket:
    """``sock`` wrapped in TLS for ``host``, verified against the system's CAs."""
    import ssl  # only for https:// (importing it costs ~7 ms)

    return ssl.create_default_context().wrap_socket(sock, server_hostname=host)


class Response:
    """An answer: ``status``, ``reason``, headers (:meth:`getheader`), and its body read
    by :meth:`read` or :meth:`read1`. ``length``: the bytes of a ``Content-Length``
    body not read yet (``None`` for chunked or to-the-end bodies)."""

    def __init__(self, reader: BufferedReader[_SocketReader], status: int, reason: str,
                 headers: dict[str, str]) -> None:
        self._reader = reader
        self.status = status
        self.reason = reason
        self._headers = headers
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._done = False
        self.length: int | None = None
        if not self._chunked and "content-length" in headers:
            value = headers["content-length"]
            if not value or len(value) > 18 or not set(value) <= _DIGITS:
                raise ProtocolError(f"bad Content-Length: {value[:40]!r}")
            self.length = int(value)

    def getheader(self, name: str) -> str | None:
        """The header ``name`` (any case), or None."""
        return self._headers.get(name.lower())

    def _exact(self, n: int) -> bytes:
        data = self._reader.read(n)
        if len(data) < n:
            raise ProtocolError(f"answer cut short ({len(data)} of {n} bytes)")
        return data

    def _line(self) -> bytes:
        line = self._reader.readline(_MAX_LINE)
        if not line.endswith(b"\n"):
            raise ProtocolError("answer cut short")
        return line

    def read1(self, n: int = 65536) -> bytes:
        """What has arrived of the body, up to ``n`` bytes (a chunked answer: at most
        the rest of one chunk); ``b""`` once the body has ended."""
        if self._done:
            return b""
        if self._chunked:
            size_line = self._line().split(b";", 1)[0].strip().decode("latin-1")
            if not size_line or len(size_line) > 8 or not set(size_line) <= _HEX:
                raise ProtocolError(f"bad chunk size: {size_line[:40]!r}")
            size = int(size_line, 16)
            if size > _MAX_CHUNK:
                raise ProtocolError(f"chunk too large ({size} bytes)")
            if size == 0:
                for _ in range(_MAX_HEADERS + 1):  # trailers, then the end
                    if self._line() in (b"\r\n", b"\n"):
                        break
                else:
                    raise ProtocolError(f"more than {_MAX_HEADERS} trailer lines")
                self._done = True
                return b""
            data = self._exact(size)
            self._line()  # the CRLF after the chunk
            return data
        if self.length is not None:
            if self.length == 0:
                self._done = True
                return b""
            data = self._reader.read1(min(n, self.length))
            if not data:
                raise ProtocolError(f"answer cut short ({self.length} bytes missing)")
            self.length -= len(data)
            return data
        data = self._reader.read1(n)
        if not data:
            self._done = True
        return data

    def read(self) -> bytes:
        """The rest of the body."""
        parts = []
        while part := self.read1():
            parts.append(part)
        return b"".join(parts)


class _SocketReader(RawIOBase):
    """A socket's incoming bytes as a raw stream (what :meth:`socket.socket.makefile`
    gives, for any object with ``recv_into``: the ``_socket`` socket of
    :mod:`bridge.cli.quick` too, whose start-up skips :mod:`socket`)."""

    def __init__(self, sock: Socket) -> None:
        super().__init__()
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        return self._sock.recv_into(buffer)


class Connection:
    """One request on one connection, opened by ``connect`` (a callable returning the
    connected socket); ``host`` goes in the ``Host`` header."""

    def __init__(self, connect: Callable[[], Socket], host: str) -> None:
        self._connect = connect
        self._host = host
        self.sock: Socket | None = None

    def connect(self) -> None:
        """Open the connection (``OSError`` when it cannot be)."""
        self.sock = self._connect()

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> None:
        """Send the request (``Connection: close``; a ``Content-Length`` for a body)."""
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body is not None or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(body or b'')}")
        if any("\r" in line or "\n" in line for line in lines):
            raise ProtocolError("a request header holds a line break")
        try:
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
        except UnicodeEncodeError:
            raise ProtocolError("a request header is not ASCII") from None
        self.sock.sendall(head + (body or b""))

    def getresponse(self) -> Response:
        """Read the answer's status line and headers (1xx answers skipped)."""
        if self.sock is None:
            raise ProtocolError("not connected")
        reader = BufferedReader(_SocketReader(self.sock))
        for _ in range(_MAX_INTERIM + 1):
            status_line = reader.readline(_MAX_LINE)
            parts = status_line.decode("latin-1").rstrip("\r\n").split(" ", 2)
            if (len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3
                    or not set(parts[1]) <= _DIGITS):
                raise ProtocolError(f"not an HTTP answer: {status_line[:80]!r}")
            headers: dict[str, str] = {}
            for _ in range(_MAX_HEADERS + 1):
                line = reader.readline(_MAX_LINE)
                if line in (b"\r\n", b"\n"):
                    break
                if not line.endswith(b"\n"):
                    raise ProtocolError("answer cut short in its head")
                name, sep, value = line.decode("latin-1").partition(":")
                if not sep:
                    raise ProtocolError(f"bad header line: {line[:80]!r}")
                headers[name.strip().lower()] = value.strip()
            else:
                raise ProtocolError(f"more than {_MAX_HEADERS} header lines")
            status = int(parts[1])
            if status >= 200 or status < 100:
                return Response(reader, status, parts[2] if len(parts) > 2 else "", headers)
        raise ProtocolError(f"more than {_MAX_INTERIM} interim (1xx) answers")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
