"""The commands' HTTP/1.1 (:mod:`bridge.http11`) against answers written byte by byte:
what a well-formed answer gives, and that anything else is a :class:`ProtocolError`
(never another exception, never a hang)."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.http11 import Connection, ProtocolError


def exchange(answer: bytes, body: bytes | None = None) -> tuple[bytes, int, bytes]:
    """Send a request to a peer that answers ``answer`` and closes; the request as the
    peer read it, the status and the body as the client read them."""
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    seen = bytearray()

    def peer() -> None:
        with theirs:
            theirs.settimeout(5)
            while b"\r\n\r\n" not in seen:
                chunk = theirs.recv(65536)
                if not chunk:
                    break
                seen.extend(chunk)
            theirs.sendall(answer)

    thread = threading.Thread(target=peer)
    thread.start()
    connection = Connection(lambda: ours, "hpc-bridge")
    try:
        connection.request("POST" if body is not None else "GET", "/v1/x", body,
                           {"Accept": "application/json"})
        response = connection.getresponse()
        return bytes(seen), response.status, response.read()
    finally:
        connection.close()
        thread.join(5)


def test_content_length_chunked_and_to_the_end() -> None:
    request, status, body = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"{}")
    assert (status, body) == (200, b"hi")
    assert request.startswith(b"POST /v1/x HTTP/1.1\r\nHost: hpc-bridge\r\nConnection: close\r\n")
    assert b"Content-Length: 2\r\n" in request
    chunked = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n")
    assert exchange(chunked)[1:] == (201, b"abcde")
    assert exchange(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")[1:] == (200, b"until the end")
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
    assert exchange(interim)[1:] == (204, b"")


@pytest.mark.parametrize("answer", [
    b"",  # closed at once
    b"SSH-2.0-OpenSSH\r\n\r\n",
    b"HTTP/1.1 2\xb2 OK\r\n\r\n",  # a superscript two is a digit to str.isdigit
    b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n0123456789",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    b"HTTP/1.1 200 OK\r\nbad header line\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n" * 11,
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"T: 1\r\n" * 101,
])
def test_malformed_answers_are_protocol_errors(answer: bytes) -> None:
    with pytest.raises(ProtocolError):
        exchange(answer)


def test_a_header_is_never_split_or_widened() -> None:
    with pytest.raises(ProtocolError, match="line break"):
        Connection(lambda: socket.socket(), "h").request("GET", "/", None, {"X": "a\r\nB: c"})
    with pytest.raises(ProtocolError, match="not ASCII"):
        Connection(lambda: socket.socket(), "h\u00e9").request("GET", "/", None, {})


@given(st.binary(max_size=300))
def test_any_answer_is_an_answer_or_a_protocol_error(answer: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        exchange(b"HTTP/1.1 200 OK\r\n" + answer)
