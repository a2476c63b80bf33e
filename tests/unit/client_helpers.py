"""Shared fixtures for the API client's unit tests: a tiny real aiohttp server standing in
for the daemon (:func:`daemon`, on a unix socket and on 127.0.0.1), the job it answers
with, and clients pointed at it."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from bridge.client import BridgeClient

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


def _tcp(daemon: FakeDaemon, **kwargs: Any) -> BridgeClient:
    return BridgeClient(url=daemon.url + "/", **kwargs)


def _answer(body: Any, status: int = 200) -> Override:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=status)

    return answer
