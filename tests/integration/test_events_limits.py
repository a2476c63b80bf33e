"""Long-polls of ``/v1/events`` count against the per-user limits: bob holding as many
as ``limits.max_concurrent_requests`` allows gets 429 for the next request, while
alice's long-poll and listing are served (docs/security.md, fair share)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.integration.bed import BIN, Daemon
from tests.integration.test_fair_share import limited  # noqa: F401  (the fixture)
from tests.integration.test_multiuser_safety import api_as

pytestmark = pytest.mark.integration

#: As bob: four long-polls on connections of their own, then one more request every
#: 0.2 s (at most 20) until one is refused; prints that answer as JSON.
HOLDER = """
import json, sys, threading, time, httpx
sock = sys.argv[1]
def client():
    return httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://b",
                        timeout=60)
def poll():
    try:
        client().get("/v1/events", params={"timeout": "10"})
    except httpx.HTTPError:
        pass
for _ in range(4):
    threading.Thread(target=poll, daemon=True).start()
answer = {"status": 0}
for _ in range(20):
    r = client().get("/v1/events", params={"timeout": "0"})
    if r.status_code != 200:
        answer = {"status": r.status_code, "body": r.json()}
        break
    time.sleep(0.2)
print(json.dumps(answer), flush=True)
sys.stdin.read()
"""


def test_bobs_long_polls_count_against_his_concurrent_requests(
        limited: Daemon) -> None:  # noqa: F811
    holder = subprocess.Popen(
        ["runuser", "-u", "bob", "--", "env", "-i", f"PATH={BIN}:/usr/bin:/bin",
         str(BIN / "python"), "-c", HOLDER, str(limited.socket)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        seen = json.loads(holder.stdout.readline())
        assert seen["status"] == 429, seen
        assert seen["body"]["limit"] == "max_concurrent_requests", seen
        status, body = api_as(limited, "alice", "GET", "/v1/events?timeout=0")
        assert status == 200 and body["items"] == [], body
        assert limited.cli("alice", "tqueue").returncode == 0
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(30)
