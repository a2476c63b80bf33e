"""The API client's wire format, against a tiny real aiohttp server.

The server listens on a unix socket (the default way in) and on 127.0.0.1 (the
``HPC_BRIDGE_URL`` way, with a bearer token).
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
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
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

JOB_VIEW: dict[str, Any] = {
    "id": 7,
    "uid": "u-7",
    "name": "tj-7",
    "namespace": "default",
    "jobName": "train",
    "user": "alice",
    "unixUid": 1000,
    "backend": "slurm",
    "backendId": "1234",
    "state": "Running",
    "reason": None,
    "message": None,
    "runtime": "plain",
    "numNodes": 1,
    "nodes": ["n1"],
    "exitCode": None,
    "partition": "gpu",
    "timeLimitMinutes": 60,
    "submitTime": "2026-01-02T03:04:05Z",
    "startTime": None,
    "endTime": None,
    "stdout": "/o",
    "stderr": "/e",
    "trainJob": {},
}


Override = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class FakeDaemon:
    """Records requests; answers per the API contract, or with ``override`` when set.

    ``url``: the same server over TCP (``http://127.0.0.1:PORT``).
    """

    socket_path: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    override: Override | None = None

    def record(self, request: web.Request, body: Any = None) -> None:
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "raw_path": request.raw_path,
                "query": dict(request.query),
                "headers": dict(request.headers),
                "body": body,
            }
        )


def _app(daemon: FakeDaemon) -> web.Application:
    @web.middleware
    async def override(request: web.Request, handler: Override) -> web.StreamResponse:
        if daemon.override is None:
            return await handler(request)
        daemon.record(request, await request.read() or None)
        return await daemon.override(request)

    async def submit(request: web.Request) -> web.Response:
        body = await request.json()
        daemon.record(request, body)
        if body.get("kind") != "TrainJob":
            return web.json_response({"error": "kind: must be TrainJob"}, status=400)
        return web.json_response(
            {"id": 42, "uid": "u-42", "name": "tj-42", "state": "Pending"}, status=201
        )

    async def list_jobs(request: web.Request) -> web.Response:
        daemon.record(request)
        return web.json_response({"items": [JOB_VIEW]})

    async def show(request: web.Request) -> web.Response:
        daemon.record(request)
        ref = request.match_info["ref"]
        if ref == "404":
            return web.json_response({"error": "job 404 not found"}, status=404)
        if ref == "500":
            return web.Response(text="boom", status=500)
        if ref == "garbage":
            return web.Response(text="<html>", status=200)
        return web.json_response({**JOB_VIEW, "transitions": []})

    async def cancel(request: web.Request) -> web.Response:
        daemon.record(request)
        if request.match_info["ref"] == "bob":
            return web.json_response({"error": "not the owner"}, status=403)
        return web.json_response({**JOB_VIEW, "state": "Cancelled"}, status=202)

    async def log(request: web.Request) -> web.StreamResponse:
        daemon.record(request)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        offset = int(request.query.get("offset", "0"))
        data = b"line 1\nline 2\n\xff binary\n"[offset:]
        for i in range(0, len(data), 5):
            await response.write(data[i : i + 5])
            if request.query.get("follow") == "1":
                await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    app = web.Application(middlewares=[override])
    app.router.add_post("/v1/jobs", submit)
    app.router.add_get("/v1/jobs", list_jobs)
    app.router.add_get("/v1/jobs/{ref}", show)
    app.router.add_post("/v1/jobs/{ref}/cancel", cancel)
    app.router.add_get("/v1/jobs/{ref}/log", log)
    return app


@pytest.fixture
def daemon() -> Iterator[FakeDaemon]:
    directory = tempfile.mkdtemp(prefix="hb-", dir="/tmp")  # short: sun_path is 108 bytes
    fake = FakeDaemon(os.path.join(directory, "bridge.sock"))
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(fake))

    async def start() -> None:
        await runner.setup()
        await web.UnixSite(runner, fake.socket_path).start()
        tcp = web.TCPSite(runner, "127.0.0.1", 0)
        await tcp.start()
        (port,) = {address[1] for address in runner.addresses if isinstance(address, tuple)}
        fake.url = f"http://127.0.0.1:{port}"

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        shutil.rmtree(directory, ignore_errors=True)


def _client(daemon: FakeDaemon) -> BridgeClient:
    return BridgeClient.from_env(
        {"HPC_BRIDGE_SOCKET": daemon.socket_path, "HPC_BRIDGE_TOKEN": "not-sent-on-the-socket"}
    )


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


# ------------------------------------------------------------------------ TCP


def _tcp(daemon: FakeDaemon, **kwargs: Any) -> BridgeClient:
    return BridgeClient(url=daemon.url + "/", **kwargs)


def _answer(body: Any, status: int = 200) -> Override:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=status)

    return answer


def test_tcp_sends_the_bearer_token(daemon: FakeDaemon) -> None:
    with _tcp(daemon, token="s3cret") as client:
        assert client.list_jobs() == [JOB_VIEW]
    (seen,) = daemon.requests
    assert (seen["method"], seen["raw_path"]) == ("GET", "/v1/jobs")
    assert seen["headers"]["Authorization"] == "Bearer s3cret"
    assert seen["headers"]["User-Agent"] == "hpc-bridge-client/1"
    assert seen["headers"]["Accept"] == "application/json"


def test_url_with_a_path_prefix(daemon: FakeDaemon) -> None:
    daemon.override = _answer({"items": []})
    with BridgeClient(url=daemon.url + "/bridge/") as client:
        assert client.list_jobs(user="bob") == []
    assert daemon.requests[0]["path"] == "/bridge/v1/jobs"
    assert daemon.requests[0]["query"] == {"user": "bob"}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for ``localhost`` and its key (openssl)."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = str(directory / "cert.pem"), str(directory / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def test_https_speaks_tls_and_checks_the_certificate(
        certificate: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A real TLS handshake with the system's CA store (here: SSL_CERT_FILE), the host
    name checked; an untrusted certificate is a clear connection error."""
    import ssl

    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    loop = asyncio.new_event_loop()
    app = web.Application()

    async def jobs(request: web.Request) -> web.Response:
        return web.json_response({"items": [JOB_VIEW], "seen": request.secure})

    app.router.add_get("/v1/jobs", jobs)
    runner = web.AppRunner(app)

    async def start() -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        return int(runner.addresses[0][1])

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        with BridgeClient(url=f"https://localhost:{port}") as client:
            assert client.list_jobs()[0]["id"] == JOB_VIEW["id"]
        monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent")
        with BridgeClient(url=f"https://localhost:{port}") as client, pytest.raises(
                BridgeClientError) as info:
            client.list_jobs()
        assert "CERTIFICATE_VERIFY_FAILED" in info.value.message
        assert info.value.message.startswith(f"cannot reach hpc-bridge at https://localhost:{port}")
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_https_urls_use_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[str, int, bool]] = []

    def tcp(host: str, port: int, tls: bool, timeout: float) -> socket.socket:
        opened.append((host, port, tls))
        raise ConnectionRefusedError(111, "refused")

    monkeypatch.setattr(client_module, "_tcp_socket", tcp)
    for url in ("https://bridge.example:8443/", "http://[::1]:8080", "https://h"):
        with pytest.raises(ConnectionRefusedError):
            BridgeClient(url=url)._new_connection().connect()
    assert opened == [("bridge.example", 8443, True), ("::1", 8080, False), ("h", 443, True)]


@pytest.mark.parametrize("url", ["ftp://h:1", "http://h:port", "http:///v1", "h:8080"])
def test_invalid_url(url: str) -> None:
    with pytest.raises(BridgeClientError) as info:
        BridgeClient(url=url)
    assert info.value.message.startswith(f"invalid address {url!r} (HPC_BRIDGE_URL): ")


def test_a_token_must_fit_in_a_header() -> None:
    with pytest.raises(BridgeClientError, match="HPC_BRIDGE_TOKEN"):
        BridgeClient(url="http://h:1", token="abc\r\nX-Evil: 1")


def test_from_env_prefers_the_url() -> None:
    client = BridgeClient.from_env(
        {"HPC_BRIDGE_URL": "http://h:1", "HPC_BRIDGE_TOKEN": "t", "HPC_BRIDGE_SOCKET": "/x.sock"}
    )
    assert client.where == "http://h:1"
    client.close()


def test_unauthorized_names_the_token_variable(daemon: FakeDaemon) -> None:
    daemon.override = _answer({"error": "missing or invalid bearer token"}, 401)
    with _tcp(daemon) as client, pytest.raises(BridgeClientError) as info:
        client.get_job(1)
    assert info.value.message == "missing or invalid bearer token (set HPC_BRIDGE_TOKEN)"
    assert info.value.status == 401


def test_refs_are_one_path_segment(daemon: FakeDaemon) -> None:
    daemon.override = _answer(JOB_VIEW)
    with _tcp(daemon) as client:
        client.get_job("a/../b?c")
        for bad in ("..", ".", ""):
            with pytest.raises(BridgeClientError, match="invalid job reference"):
                client.get_job(bad)
    assert [r["raw_path"] for r in daemon.requests] == ["/v1/jobs/a%2F..%2Fb%3Fc"]


def test_timeouts_and_broken_answers(daemon: FakeDaemon) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.5)
        return web.json_response({"items": []})

    daemon.override = slow
    with _tcp(daemon, timeout=0.05) as client, pytest.raises(BridgeClientError) as info:
        client.list_jobs()
    assert info.value.message == f"hpc-bridge at {daemon.url}/ did not answer within 0.05 s"
    assert info.value.status is None

    daemon.override = _answer({"items": "nope"})
    with _tcp(daemon) as client, pytest.raises(BridgeClientError, match="unexpected job list"):
        client.list_jobs()

    daemon.override = _answer({"id": "x"}, 201)
    with _tcp(daemon) as client, pytest.raises(BridgeClientError, match="unexpected submit"):
        client.submit({"kind": "TrainJob"})


def test_log_http_error_is_a_client_error(daemon: FakeDaemon) -> None:
    daemon.override = _answer({"error": "Access/permission denied"}, 403)
    with _tcp(daemon) as client, pytest.raises(BridgeClientError) as info:
        list(client.stream_log(3))
    assert (info.value.message, info.value.status) == ("Access/permission denied", 403)


def test_tcp_connect_error_names_the_url_and_reason() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # a port with no listener
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with BridgeClient(url=url) as client, pytest.raises(BridgeClientError) as info:
            client.list_jobs()
    assert info.value.message == (
        f"cannot reach hpc-bridge at {url}: is the daemon running? (set HPC_BRIDGE_URL) "
        "[[Errno 111] Connection refused]"
    )


def test_importing_the_client_stays_light() -> None:
    """The t* commands import this module on every run (see the module docstring)."""
    heavy = ["bridge.model", "pydantic", "httpx", "yaml", "dataclasses", "http.client", "ssl",
             "email"]
    code = f"import sys, bridge.client; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_submission_without_answer_is_retried_with_the_same_key(
        daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first POST gets no answer in time (it may have been admitted): the retry
    carries the same Idempotency-Key, so the daemon answers it with the first job."""
    monkeypatch.setattr(client_module, "SUBMIT_RETRY_DELAY", 0.0)
    calls = 0

    async def first_slow(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(0.5)
        return web.json_response({"id": 7, "uid": "u-7", "name": "tj-7",
                                  "state": "Pending"}, status=200 if calls > 1 else 201)

    daemon.override = first_slow
    with _tcp(daemon, timeout=0.2) as client:
        assert client.submit({"kind": "TrainJob"}).id == 7
        client.submit({"kind": "TrainJob"})  # a new invocation: a new key
    keys = [r["headers"]["Idempotency-Key"] for r in daemon.requests]
    assert len(keys) == 3 and keys[0] == keys[1] != keys[2]


def test_a_refused_submission_is_not_retried(daemon: FakeDaemon) -> None:
    daemon.override = _answer({"error": "metadata.uid: bad"}, 400)
    with _tcp(daemon) as client, pytest.raises(BridgeClientError):
        client.submit({"kind": "TrainJob"}, idempotency_key="k1")
    assert [r["headers"]["Idempotency-Key"] for r in daemon.requests] == ["k1"]


def _busy_then(body: Any, busy: int, retry_after: str = "2") -> tuple[Override, list[int]]:
    """An answer that is 429 (``Retry-After``) ``busy`` times, then ``body``."""
    calls: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        calls.append(1)
        if len(calls) <= busy:
            return web.json_response({"error": "too many submissions: bob may ...",
                                      "limit": "submit_rate"}, status=429,
                                     headers={"Retry-After": retry_after})
        return web.json_response(body, status=201)

    return answer, calls


def test_a_429_is_asked_again_after_retry_after(daemon: FakeDaemon,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", slept.append)
    answer, calls = _busy_then({"id": 5, "uid": "u", "name": "n", "state": "Pending"}, 2)
    daemon.override = answer
    with _client(daemon) as client:
        assert client.submit({"kind": "TrainJob"}).id == 5
    assert slept == [2.0, 2.0] and len(calls) == 3


def test_a_429_is_given_up_after_the_retries_or_a_long_wait(
        daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", slept.append)
    daemon.override, calls = _busy_then({}, 99)
    with _client(daemon) as client, pytest.raises(BridgeClientError) as info:
        client.submit({"kind": "TrainJob"})
    assert info.value.status == 429 and info.value.retry_after == 2.0
    assert info.value.message.startswith("too many submissions")
    assert len(calls) == 4 and slept == [2.0] * 3
    slept.clear()
    daemon.override, calls = _busy_then({}, 99, retry_after="30")
    with _client(daemon) as client, pytest.raises(BridgeClientError):
        client.submit({"kind": "TrainJob"})
    assert len(calls) == 1 and slept == []  # too long to wait for: said at once


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
