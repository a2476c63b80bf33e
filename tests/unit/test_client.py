"""The API client's wire format, against a tiny real aiohttp server.

The server listens on a unix socket (the default way in) and on 127.0.0.1 (the
``HPC_BRIDGE_URL`` way, with a bearer token); it and its fixtures are in
client_helpers.py. The ``HPC_BRIDGE_URL`` way (TCP, TLS, URLs, timeouts) is tested in
test_client_tcp.py; retried submissions (a lost answer, 429) in test_client_retries.py.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any

import pytest
from aiohttp import web

from bridge import client as client_module
from bridge.client import (
    DEFAULT_SOCKET,
    BridgeClient,
    BridgeClientError,
    SubmitResult,
)
from bridge.sbatch import parse_tbatch, to_trainjob
from tests.unit.client_helpers import JOB_VIEW, FakeDaemon, _client
from tests.unit.client_helpers import daemon as daemon


def test_submit_posts_the_trainjob_document(daemon: FakeDaemon) -> None:
    request = parse_tbatch(["-N", "2", "job.sh"], "#!/bin/sh\nhostname\n")
    job = to_trainjob(request, cwd="/home/alice", environ={"A": "1"})
    with _client(daemon) as client:
        result = client.submit(job)
    assert result == SubmitResult(id=42, uid="u-42", name="tj-42", state="Pending")
    (seen,) = daemon.requests
    assert (seen["method"], seen["path"]) == ("POST", "/v1/jobs")
    assert seen["body"] == job.to_dict()
    assert seen["headers"]["Content-Type"] == "application/json"
    assert "Authorization" not in seen["headers"]  # identity comes from the socket


def test_submit_error_message_from_the_server(daemon: FakeDaemon) -> None:
    with _client(daemon) as client, pytest.raises(BridgeClientError) as info:
        client.submit({"kind": "Other"})
    assert (info.value.message, info.value.status) == ("kind: must be TrainJob", 400)


def test_list_query_parameters(daemon: FakeDaemon) -> None:
    with _client(daemon) as client:
        assert client.list_jobs() == [JOB_VIEW]
        client.list_jobs(states=["Pending", "Running"], user="alice")
        client.list_jobs(all_states=True)
    assert [r["query"] for r in daemon.requests] == [
        {},
        {"states": "Pending,Running", "user": "alice"},
        {"states": "all"},
    ]


def test_show_and_cancel(daemon: FakeDaemon) -> None:
    with _client(daemon) as client:
        assert client.get_job("tj 7")["transitions"] == []
        assert client.cancel(7)["state"] == "Cancelled"
        with pytest.raises(BridgeClientError) as info:
            client.cancel("bob")
        assert (info.value.message, info.value.status) == ("not the owner", 403)
        with pytest.raises(BridgeClientError) as info:
            client.get_job(404)
        assert (info.value.message, info.value.status) == ("job 404 not found", 404)
        with pytest.raises(BridgeClientError) as info:
            client.get_job(500)
        assert (info.value.message, info.value.status) == ("boom", 500)
        with pytest.raises(BridgeClientError, match="not JSON"):
            client.get_job("garbage")
    assert daemon.requests[0]["raw_path"] == "/v1/jobs/tj%207"
    assert (daemon.requests[1]["method"], daemon.requests[1]["path"]) == (
        "POST",
        "/v1/jobs/7/cancel",
    )


def test_log_streams_bytes(daemon: FakeDaemon) -> None:
    with _client(daemon) as client:
        data = b"".join(client.stream_log(7))
        followed = b"".join(client.stream_log(7, stream="stderr", offset=7, follow=True))
    assert data == b"line 1\nline 2\n\xff binary\n"
    assert followed == b"line 2\n\xff binary\n"
    assert daemon.requests[0]["query"] == {"stream": "stdout", "offset": "0", "follow": "0"}
    assert daemon.requests[1]["query"] == {"stream": "stderr", "offset": "7", "follow": "1"}


def test_missing_socket_says_what_to_do(tmp_path: Any) -> None:
    path = str(tmp_path / "nope.sock")
    with BridgeClient.from_env({"HPC_BRIDGE_SOCKET": path}) as client:
        with pytest.raises(BridgeClientError) as info:
            client.list_jobs()
        assert info.value.message == (
            f"cannot reach hpc-bridge at {path}: is the daemon running? (set HPC_BRIDGE_SOCKET)"
        )
        assert info.value.status is None
        with pytest.raises(BridgeClientError, match="cannot reach"):
            b"".join(client.stream_log(1))


def test_default_socket() -> None:
    with BridgeClient.from_env({}) as client:
        assert client.where == DEFAULT_SOCKET == "/run/hpc-bridge/bridge.sock"


def test_socket_that_nobody_listens_on() -> None:
    directory = tempfile.mkdtemp(prefix="hb-", dir="/tmp")
    path = os.path.join(directory, "stale.sock")
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path)  # bound, never listening: connecting is refused
            with BridgeClient(socket_path=path) as client, pytest.raises(BridgeClientError) as info:
                client.cancel(1)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert info.value.message == (
        f"cannot reach hpc-bridge at {path}: is the daemon running? (set HPC_BRIDGE_SOCKET)"
    )


def test_socket_permission_denied(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: str, timeout: float) -> socket.socket:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(client_module, "_unix_socket", denied)
    client = BridgeClient(socket_path="/run/x.sock")
    with client, pytest.raises(BridgeClientError) as info:
        client.get_job(1)
    assert info.value.message == "cannot reach hpc-bridge at /run/x.sock: permission denied"
    assert info.value.status is None


def test_following_a_log_has_no_read_timeout(daemon: FakeDaemon) -> None:
    async def slow_log(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for part in (b"a", b"b"):
            await asyncio.sleep(0.3)
            await response.write(part)
        await response.write_eof()
        return response

    daemon.override = slow_log
    client = BridgeClient(socket_path=daemon.socket_path, timeout=0.1)
    assert b"".join(client.stream_log(1, follow=True)) == b"ab"
    with pytest.raises(BridgeClientError) as info:
        b"".join(client.stream_log(1))
    assert info.value.message == (
        f"hpc-bridge at {daemon.socket_path} did not answer within 0.1 s"
    )


@pytest.mark.parametrize("chunked", [True, False])
def test_log_cut_short_is_an_error(daemon: FakeDaemon, chunked: bool) -> None:
    """The daemon going away mid-answer (chunked, or before Content-Length bytes)."""

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        if not chunked:
            response.content_length = 100
        await response.prepare(request)
        await response.write(b"abc")
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return response

    daemon.override = cut
    received: list[bytes] = []
    with _client(daemon) as client, pytest.raises(BridgeClientError) as info:
        for chunk in client.stream_log(1):
            received.append(chunk)
    assert b"".join(received) == b"abc"
    assert info.value.message.startswith(
        f"connection to hpc-bridge at {daemon.socket_path} failed: "
    )
    assert info.value.status is None


def test_importing_the_client_stays_light() -> None:
    """The t* commands import this module on every run (see the module docstring)."""
    heavy = ["bridge.model", "pydantic", "httpx", "yaml", "dataclasses", "http.client", "ssl",
             "email"]
    code = f"import sys, bridge.client; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_iter_pages_follows_continue_tokens(daemon: FakeDaemon) -> None:
    pages = {"": ({"items": [{"id": 1}, {"id": 2}], "metadata": {"continue": "t1"}}),
             "t1": ({"items": [{"id": 3}], "metadata": {"continue": "t2"}}),
             "t2": ({"items": [], "metadata": {}})}

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response(pages[request.query.get("continue", "")])

    daemon.override = answer
    with _client(daemon) as client:
        assert [[j["id"] for j in p] for p in client.iter_pages(user="bob", page_size=2)] == [
            [1, 2], [3], []]
    assert [r["query"] for r in daemon.requests] == [
        {"user": "bob", "limit": "2"}, {"user": "bob", "limit": "2", "continue": "t1"},
        {"user": "bob", "limit": "2", "continue": "t2"}]
    pages["t2"] = {"items": [], "metadata": {"continue": "t1"}}  # a loop: refused
    with _client(daemon) as client, pytest.raises(BridgeClientError):
        client.list_jobs()


def test_the_next_page_is_asked_for_while_the_caller_works_on_this_one(
        daemon: FakeDaemon) -> None:
    """iter_pages asks for page 2 before the caller is done with page 1 (tqueue formats
    one page while the daemon builds the next); an error of the page asked ahead is
    raised where the caller asks for that page."""
    pages = {"": {"items": [{"id": 1}], "metadata": {"continue": "t1"}},
             "t1": {"items": [{"id": 2}], "metadata": {}}}
    asked_ahead = threading.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        token = request.query.get("continue", "")
        if token == "t1":
            asked_ahead.set()
        if token not in pages:
            return web.json_response({"error": "gone"}, status=410)
        return web.json_response(pages[token])

    daemon.override = answer
    with _client(daemon) as client:
        pager = client.iter_pages()
        assert next(pager) == [{"id": 1}]
        assert asked_ahead.wait(10)  # page 1 still in the caller's hands
        assert [r["query"].get("continue") for r in daemon.requests] == [None, "t1"]
        assert next(pager) == [{"id": 2}]
        assert list(pager) == []
    del pages["t1"]
    with _client(daemon) as client:
        pager = client.iter_pages()
        assert next(pager) == [{"id": 1}]
        with pytest.raises(BridgeClientError, match="gone"):
            next(pager)


def test_a_full_listen_queue_is_waited_out_then_reported() -> None:
    """A daemon too busy to accept (its listen queue full: EAGAIN) is tried again until
    the timeout, then reported as not answering -- no traceback, no hang."""
    directory = tempfile.mkdtemp(prefix="hb-", dir="/tmp")
    path = os.path.join(directory, "full.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        server.bind(path)
        server.listen(0)
        while True:  # fill the queue: connects that nobody accepts
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            try:
                filler.connect(path)
            except BlockingIOError:
                break
        with BridgeClient(socket_path=path, timeout=0.3) as client, \
                pytest.raises(BridgeClientError) as info:
            client.list_jobs()
        assert info.value.status is None
        assert "did not answer within 0.3 s" in info.value.message
    finally:
        for filler in fillers:
            filler.close()
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_an_answer_before_the_whole_body_is_read_reaches_the_user() -> None:
    """The daemon answers a body too large (413) from its head alone and closes without
    reading the rest: the client's write breaks, and the answer is still what the user
    sees (not "connection failed", not a retry)."""
    directory = tempfile.mkdtemp(prefix="hb-", dir="/tmp")
    path = os.path.join(directory, "early.sock")
    answer = b'{"error": "request body too large: at most 1048576 bytes"}'
    heads: list[bytes] = []

    def serve(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            heads.append(head)
            conn.sendall(b"HTTP/1.1 413 Request Entity Too Large\r\n"
                         b"Content-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: " + str(len(answer)).encode() + b"\r\n\r\n"
                         + answer)
            conn.shutdown(socket.SHUT_WR)

    try:
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(path)
            listener.listen(1)
            server = threading.Thread(target=serve, args=(listener,))
            server.start()
            big = {"kind": "TrainJob", "pad": "x" * (32 << 20)}  # beyond any socket buffer
            with BridgeClient(socket_path=path) as client, pytest.raises(
                    BridgeClientError) as info:
                client.submit(big)
            server.join(10)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert (info.value.status, info.value.message) == (
        413, "request body too large: at most 1048576 bytes")
    assert len(heads) == 1  # answered, so not sent again
