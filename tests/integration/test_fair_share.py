"""One user cannot take the daemon from the others (issue 11, "Fair share under load").

Each test runs a real daemon on the real Slurm bed; the users are real Unix users
(bob floods or misbehaves, alice carries on) talking over the unix socket, so the
daemon knows them from the kernel. Jobs are submitted suspended (``spec.suspend``):
they count as unfinished but never reach Slurm, so the bed runs nothing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import (
    BIN,
    Daemon,
    cleanup,
    fresh_daemon_dir,
    trainjob_doc,
    wait_for,
)
from tests.integration.conftest import rest_settings

pytestmark = pytest.mark.integration

#: What the user scripts below connect with: http.client over the daemon's unix socket
#: (raw requests, including a head without its body; the t* client speaks only whole ones).
UNIX_CONNECTION = """
import http.client, socket
class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("hpc-bridge", timeout=timeout)
        self.unix_path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)
"""

#: Run as a user: POST each document of the JSON list on stdin (a number: only a head
#: announcing that many bytes) and print, per request, {"status", "retryAfter", "body"}.
POSTER = UNIX_CONNECTION + """
import json, sys
out = []
for body in json.loads(sys.stdin.read()):
    c = _UnixHTTPConnection(sys.argv[1], 60)
    if isinstance(body, int):  # only the head, announcing a body of that many bytes
        c.putrequest("POST", "/v1/jobs")
        c.putheader("Content-Type", "application/json")
        c.putheader("Content-Length", str(body))
        c.endheaders()
    else:
        c.request("POST", "/v1/jobs", body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out.append({"status": r.status, "retryAfter": r.getheader("Retry-After"),
                "body": json.loads(r.read() or b"null")})
    c.close()
print(json.dumps(out))
"""

#: Run as a user: hold N followed-log requests open, then make one more request, print
#: its answer, and keep the N open until stdin closes.
HOLDER = UNIX_CONNECTION + """
import json, sys
sock, ref, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
held = []
for _ in range(n):
    c = _UnixHTTPConnection(sock, 60)
    c.request("GET", f"/v1/jobs/{ref}/log?follow=1")
    held.append((c, c.getresponse()))
c = _UnixHTTPConnection(sock, 60)
c.request("GET", "/v1/jobs")
r = c.getresponse()
print(json.dumps({"held": [h[1].status for h in held], "status": r.status,
                  "retryAfter": r.getheader("Retry-After"),
                  "body": json.loads(r.read())}), flush=True)
sys.stdin.read()
"""


def suspended(outdir: Path, name: str, script_bytes: int = 0) -> dict[str, Any]:
    doc = trainjob_doc(outdir, name, "plain", ["true"])
    doc["spec"]["suspend"] = True
    if script_bytes:
        doc["metadata"]["annotations"]["hpc-bridge.io/batch-script"] = (
            "#!/bin/bash\n" + "#" * script_bytes)
    return doc


def post_as(d: Daemon, user: str, bodies: list[Any]) -> list[dict[str, Any]]:
    res = d.cli(user, "python", "-c", POSTER, str(d.socket), stdin=json.dumps(bodies))
    assert res.returncode == 0, res.stderr
    out: list[dict[str, Any]] = json.loads(res.stdout)
    return out


@pytest.fixture
def limited(testbed: dict[str, str]) -> Iterator[Daemon]:
    """A daemon with small per-user limits."""
    workdir = fresh_daemon_dir("fair")
    d = Daemon(workdir, rest_settings(testbed), extra_toml=(
        "[limits]\nmax_active_jobs = 3\nsubmit_rate = 0.01\nsubmit_burst = 6\n"
        "max_concurrent_requests = 4\nrequest_rate = 0.5\nrequest_burst = 25\n"
        "max_request_bytes = 1048576\nlog_interval = 0.5\n"
        "max_script_bytes = 65536\n"))
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


def test_bob_over_his_active_jobs_and_rate_gets_429_while_alice_goes_on(
        limited: Daemon, outdir: Path) -> None:
    bob = post_as(limited, "bob", [suspended(outdir, f"b{i}") for i in range(4)])
    assert [r["status"] for r in bob] == [201, 201, 201, 429]
    refused = bob[3]
    assert refused["body"]["limit"] == "max_active_jobs"
    assert "limits.max_active_jobs = 3" in refused["body"]["error"]
    assert int(refused["retryAfter"]) >= 1
    # tbatch prints the daemon's message and fails (no retry: the wait is too long).
    res = limited.cli("bob", "tbatch", "--wrap", "true", cwd=outdir)
    assert res.returncode == 1
    assert res.stderr.startswith("tbatch: error: too many unfinished jobs"), res.stderr
    assert "limits.max_active_jobs" in res.stderr
    # alice is not bob: her submission, tqueue and tshow work.
    [ok] = post_as(limited, "alice", [suspended(outdir, "a0")])
    assert ok["status"] == 201, ok
    queue = limited.cli("alice", "tqueue")
    assert queue.returncode == 0 and len(queue.stdout.splitlines()) == 1 + 4, queue
    # The rate: bob's burst (6) is spent (4 posts, 1 tbatch); cancelling frees places,
    # but one more submission is all the bucket holds.
    for job in bob[:3]:
        assert limited.cli("bob", "tcancel", str(job["body"]["id"])).returncode == 0
    again = post_as(limited, "bob", [suspended(outdir, "b5"), suspended(outdir, "b6")])
    assert [r["status"] for r in again] == [201, 429]
    assert again[1]["body"]["limit"] == "submit_rate"
    assert "limits.submit_rate" in again[1]["body"]["error"]
    assert int(again[1]["retryAfter"]) >= 1
    [ok] = post_as(limited, "alice", [suspended(outdir, "a1")])
    assert ok["status"] == 201, ok
    # The refusals are counted in the log, per user and limit.
    def totals() -> dict[str, int]:
        counted: dict[str, int] = {}
        for text in limited.log.read_text().splitlines():
            if "per-user limits hit" in text:
                line = json.loads(text)
                assert set(line["counts"]) == {"bob"}, line
                for limit, n in line["counts"]["bob"].items():
                    counted[limit] = counted.get(limit, 0) + n
        return counted

    expected = {"max_active_jobs": 2, "submit_rate": 1}
    wait_for(lambda: totals() == expected, 10, f"the counts {expected} in the log")
    assert "Traceback" not in limited.log.read_text()


def test_bob_over_his_concurrent_requests_gets_429_while_alice_goes_on(
        limited: Daemon, outdir: Path) -> None:
    [job] = post_as(limited, "bob", [suspended(outdir, "held")])
    holder = subprocess.Popen(
        ["runuser", "-u", "bob", "--", "env", "-i", f"PATH={BIN}:/usr/bin:/bin",
         str(BIN / "python"), "-c", HOLDER, str(limited.socket), str(job["body"]["id"]), "4"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        seen = json.loads(holder.stdout.readline())
        assert seen["held"] == [200] * 4
        assert seen["status"] == 429 and seen["body"]["limit"] == "max_concurrent_requests"
        assert "limits.max_concurrent_requests = 4" in seen["body"]["error"]
        assert int(seen["retryAfter"]) >= 1
        # While bob holds his four, alice is served.
        queue = limited.cli("alice", "tqueue", "-t", "all")
        assert queue.returncode == 0, queue.stderr
        assert len(queue.stdout.splitlines()) == 2  # header + bob's job
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(30)
    # His requests ended: bob is served again.
    assert limited.cli("bob", "tqueue").returncode == 0


def test_daemon_refuses_an_oversized_script_and_body_naming_the_limit(
        limited: Daemon, daemon: Daemon, outdir: Path) -> None:
    big_script, big_body = post_as(limited, "bob", [
        suspended(outdir, "big", script_bytes=100_000), 2_000_000])
    assert big_script["status"] == 413
    assert "limits.max_script_bytes" in big_script["body"]["error"]
    assert "65536" in big_script["body"]["error"]
    assert big_body["status"] == 413
    assert "limits.max_request_bytes" in big_body["body"]["error"]
    # The default is tbatch's own limit (4 MiB), enforced by the daemon too.
    [default] = post_as(daemon, "bob", [suspended(outdir, "big", script_bytes=5_000_000)])
    assert default["status"] == 413 and "4194304" in default["body"]["error"]
    assert "limits.max_script_bytes" in default["body"]["error"]
    assert limited.api("GET", "/v1/jobs", params={"states": "all"}).json()["items"] == []


GETTER = UNIX_CONNECTION + """
import json, sys
out = []
for _ in range(int(sys.argv[2])):
    c = _UnixHTTPConnection(sys.argv[1], 60)
    c.request("GET", "/v1/healthz")
    r = c.getresponse()
    out.append({"status": r.status, "retryAfter": r.getheader("Retry-After"),
                "body": json.loads(r.read())})
    c.close()
print(json.dumps(out))
"""


def test_bob_over_his_request_rate_is_refused_at_the_door(limited: Daemon) -> None:
    res = limited.cli("bob", "python", "-c", GETTER, str(limited.socket), "40")
    assert res.returncode == 0, res.stderr
    answers = json.loads(res.stdout)
    statuses = [a["status"] for a in answers]
    assert statuses[:20] == [200] * 20 and statuses[-10:] == [429] * 10, statuses
    refused = answers[-1]
    assert refused["body"]["limit"] == "request_rate"
    assert "limits.request_rate" in refused["body"]["error"] and "bob" in refused["body"]["error"]
    assert int(refused["retryAfter"]) >= 1
    # alice has her own rate; bob's tqueue waits out Retry-After (2 s) and is served.
    assert limited.cli("alice", "tqueue").returncode == 0
    queue = limited.cli("bob", "tqueue")
    assert queue.returncode == 0 and queue.stdout.startswith("             JOBID"), queue


PAGER = """
import json, sys
from bridge.client import BridgeClient
client = BridgeClient(socket_path=sys.argv[1])
pages = [[j["id"] for j in p] for p in client.iter_pages(all_states=True, page_size=3)]
print(json.dumps(pages))
"""


def test_pages_return_every_job_exactly_once(daemon: Daemon, outdir: Path) -> None:
    posted = post_as(daemon, "alice", [suspended(outdir, f"p{i}") for i in range(8)])
    ids = [r["body"]["id"] for r in posted]
    assert all(r["status"] == 201 for r in posted)
    cancelled = ids[2]
    assert daemon.cli("alice", "tcancel", str(cancelled)).returncode == 0
    res = daemon.cli("alice", "python", "-c", PAGER, str(daemon.socket))
    assert res.returncode == 0, res.stderr
    pages = json.loads(res.stdout)
    assert [len(p) for p in pages] == [3, 3, 2]
    assert [i for p in pages for i in p] == ids
    # Filters are the daemon's: unfinished only, one user, with pages of 2.
    first = daemon.api("GET", "/v1/jobs", params={"limit": "2", "user": "alice"}).json()
    assert [j["id"] for j in first["items"]] == ids[:2]
    assert "trainJob" not in first["items"][0] and first["items"][0]["numNodes"] == 1
    rest = daemon.api("GET", "/v1/jobs", params={
        "limit": "2", "user": "alice", "continue": first["metadata"]["continue"]}).json()
    assert [j["id"] for j in rest["items"]] == ids[3:5]
    assert daemon.api("GET", "/v1/jobs", params={"user": "bob"}).json()["items"] == []
    bad = daemon.api("GET", "/v1/jobs", params={"continue": "garbage"})
    assert bad.status_code == 400 and "continue" in bad.json()["error"]
    assert daemon.api("GET", "/v1/jobs", params={"limit": "0"}).status_code == 400
    # tqueue shows each once.
    queue = daemon.cli("alice", "tqueue", "-t", "all", "-h")
    assert sorted(int(line.split()[0]) for line in queue.stdout.splitlines()) == ids
