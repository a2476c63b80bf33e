"""The socket's door (bridge/gate.py) on both event loops: a user over the request
rate gets the canned 429 at accept on uvloop too (whose transports are no
asyncio.Transport: an isinstance check there refused every such connection with a
reset and a traceback in the daemon's log)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from aiohttp import web

from bridge import eventloop
from bridge.eventloop import EventLoopKind
from bridge.gate import GatedUnixSite
from bridge.limits import LimitSettings, UserLimits
from tests.requirements import require

CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1])
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
out = b""
while chunk := s.recv(65536):
    out += chunk
print(out.split(b"\r\n")[0].decode())
print("retry-after" in out.decode().lower())
"""


async def _two_requests_as_nobody(folder: Path) -> list[str]:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    limits = UserLimits(LimitSettings(request_rate=0.01, request_burst=1))
    path = folder / "gate.sock"
    await GatedUnixSite(runner, str(path), limits).start()
    path.chmod(0o777)
    answers = []
    try:
        for _ in range(2):
            proc = await asyncio.create_subprocess_exec(
                "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                sys.executable, "-c", CLIENT, str(path), stdout=asyncio.subprocess.PIPE)
            out, _ = await proc.communicate()
            answers.append(out.decode().strip())
    finally:
        await runner.cleanup()
    return answers


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_over_the_rate_is_answered_429_at_accept(kind: EventLoopKind) -> None:
    require(os.geteuid() == 0, "needs root (the client runs as nobody: root is exempt)")
    require(shutil.which("setpriv") is not None, "util-linux setpriv is not installed")
    folder = Path(tempfile.mkdtemp(prefix="hpcb-gate-", dir="/tmp"))  # nobody reaches it
    try:
        folder.chmod(0o755)
        first, second = eventloop.run(_two_requests_as_nobody(folder), kind)
    finally:
        shutil.rmtree(folder)
    assert first.splitlines()[0] == "HTTP/1.1 200 OK"
    assert second.splitlines() == ["HTTP/1.1 429 Too Many Requests", "True"]
