"""The fake daemon the t* command tests run against: a scripted HTTP server on 127.0.0.1
(standard library, in a thread) behind the real client, and the jobs it lists (used by
test_cli.py, test_cli_tqueue.py and test_cli_job.py; test_hold.py and test_queue_format.py
import them through test_cli.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from bridge.client import BridgeClient, JobView

#: The modules of bridge.cli that are commands (one each).
COMMAND_MODULES = ("tbatch", "tqueue", "tshow", "tcancel", "tcontrol", "tlog", "twatch")


@dataclass
class Request:
    """A request as the fake daemon saw it (``path`` decoded, ``params`` the query)."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    content: bytes


@dataclass
class Reply:
    """What the fake daemon answers: ``json`` or ``content`` with a Content-Length, or
    ``chunks`` with chunked transfer encoding (``cut``: then the connection breaks)."""

    status: int = 200
    json: Any = None
    content: bytes = b""
    chunks: Sequence[bytes] | None = None
    cut: bool = False
    content_type: str = "application/octet-stream"  # of ``chunks``


Handler = Callable[[Request], Reply]


class Daemon:
    """A scripted daemon: routes -> replies, and the requests it saw."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.routes: dict[tuple[str, str], Handler] = {}
        self.url = ""

    def on(self, method: str, path: str, handler: Handler) -> None:
        self.routes[(method, path)] = handler

    def __call__(self, request: Request) -> Reply:
        self.requests.append(request)
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            return Reply(404, json={"error": f"job {request.path} not found"})
        return handler(request)

    def body(self, i: int = -1) -> Any:
        return json.loads(self.requests[i].content)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: Daemon


class _HTTPHandler(BaseHTTPRequestHandler):
    """Hands each request to the server's :class:`Daemon` and writes its reply."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        content = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = Request(
            self.command,
            unquote(url.path),
            dict(parse_qsl(url.query)),
            dict(self.headers),
            content,
        )
        reply = self.server.fake(request)
        self.send_response(reply.status)
        if reply.chunks is None:
            body = reply.content if reply.json is None else json.dumps(reply.json).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in reply.chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if reply.cut:
            self.close_connection = True
        else:
            self.wfile.write(b"0\r\n\r\n")

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    fake = Daemon()
    server = _Server(("127.0.0.1", 0), _HTTPHandler)
    server.fake = fake
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    for command in COMMAND_MODULES:
        monkeypatch.setattr(
            f"bridge.cli.{command}.connect", lambda: BridgeClient(url=fake.url, timeout=10)
        )
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()



NOW = datetime(2026, 1, 2, 4, 0, 0, tzinfo=UTC)


def view(**over: Any) -> JobView:
    base: dict[str, Any] = {
        "id": 12,
        "uid": "u-12",
        "name": "tj-12",
        "namespace": "default",
        "jobName": "train.sh",
        "user": "alice",
        "unixUid": 1000,
        "backend": "slurm",
        "backendId": "9001",
        "state": "Running",
        "reason": None,
        "message": None,
        "runtime": "plain",
        "numNodes": 3,
        "nodes": ["n01", "n02", "n03"],
        "exitCode": None,
        "partition": "gpu",
        "timeLimitMinutes": 60,
        "submitTime": "2026-01-02T03:00:00Z",
        "startTime": "2026-01-02T03:58:55Z",
        "endTime": None,
        "stdout": "/home/alice/o",
        "stderr": "/home/alice/e",
        "trainJob": {},
    }
    base.update(over)
    return base  # type: ignore[return-value]


def _items(*jobs: JobView) -> Handler:
    return lambda request: Reply(200, json={"items": list(jobs)})
