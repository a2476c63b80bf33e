"""The API client over TCP (``HPC_BRIDGE_URL``): the bearer token, path prefixes, TLS,
URLs and job references it refuses, timeouts and broken answers."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading

import pytest
from aiohttp import web

from bridge import client as client_module
from bridge.client import BridgeClient, BridgeClientError
from tests.unit.client_helpers import JOB_VIEW, FakeDaemon, _answer, _tcp
from tests.unit.client_helpers import daemon as daemon


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
