"""The API client's wire format, against a tiny real aiohttp server on a unix socket."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

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


@dataclass
class FakeDaemon:
    """Records requests; answers per the API contract."""

    socket_path: str
    requests: list[dict[str, Any]] = field(default_factory=list)

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

    app = web.Application()
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


# ------------------------------------------------------- TCP (mock transport)


def _mock(handler: Any, **env: str) -> BridgeClient:
    client = BridgeClient(
        url=env.get("url", "https://bridge.example:8443/"),
        token=env.get("token"),
        transport=httpx.MockTransport(handler),
    )
    return client


def test_tcp_sends_the_bearer_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"items": []})

    with _mock(handler, token="s3cret") as client:
        assert client.list_jobs() == []
    assert seen[0].headers["Authorization"] == "Bearer s3cret"
    assert str(seen[0].url) == "https://bridge.example:8443/v1/jobs"


def test_from_env_prefers_the_url() -> None:
    client = BridgeClient.from_env(
        {"HPC_BRIDGE_URL": "http://h:1", "HPC_BRIDGE_TOKEN": "t", "HPC_BRIDGE_SOCKET": "/x.sock"}
    )
    assert client.where == "http://h:1"
    client.close()


def test_unauthorized_names_the_token_variable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": "missing or invalid bearer token"})

    with _mock(handler) as client, pytest.raises(BridgeClientError) as info:
        client.get_job(1)
    assert info.value.message == "missing or invalid bearer token (set HPC_BRIDGE_TOKEN)"
    assert info.value.status == 401


def test_refs_are_one_path_segment() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path.decode())
        return httpx.Response(200, json=JOB_VIEW)

    with _mock(handler) as client:
        client.get_job("a/../b?c")
        for bad in ("..", ".", ""):
            with pytest.raises(BridgeClientError, match="invalid job reference"):
                client.get_job(bad)
    assert paths == ["/v1/jobs/a%2F..%2Fb%3Fc"]


def test_timeouts_and_broken_answers() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with _mock(slow) as client, pytest.raises(BridgeClientError, match="did not answer within"):
        client.list_jobs()

    def weird(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"items": "nope"})

    with _mock(weird) as client, pytest.raises(BridgeClientError, match="unexpected job list"):
        client.list_jobs()

    def bad_submit(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={"id": "x"})

    with _mock(bad_submit) as client, pytest.raises(BridgeClientError, match="unexpected submit"):
        client.submit({"kind": "TrainJob"})


def test_log_http_error_is_a_client_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, content=json.dumps({"error": "Access/permission denied"}))

    with _mock(handler) as client, pytest.raises(BridgeClientError) as info:
        list(client.stream_log(3))
    assert (info.value.message, info.value.status) == ("Access/permission denied", 403)


def test_tcp_connect_error_names_the_url_and_reason() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with _mock(refused, url="http://h:8080") as client, pytest.raises(BridgeClientError) as info:
        client.list_jobs()
    assert info.value.message == (
        "cannot reach hpc-bridge at http://h:8080: is the daemon running? (set HPC_BRIDGE_URL) "
        "[[Errno 111] Connection refused]"
    )


def test_socket_permission_denied(tmp_path: Any) -> None:
    def denied(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 13] Permission denied", request=request)

    client = BridgeClient(socket_path="/run/x.sock", transport=httpx.MockTransport(denied))
    with client, pytest.raises(BridgeClientError) as info:
        client.get_job(1)
    assert info.value.message == "cannot reach hpc-bridge at /run/x.sock: permission denied"
