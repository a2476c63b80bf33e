"""slurm_adapter.rest against a stand-in slurmrestd that replays recorded answers.

The answers (status + body) in fixtures/slurm/v0.0.38_answers.json were recorded
from slurmrestd 22.05 on the test bed; the stand-in only serves them back.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendRejected, BackendUnavailable
from slurm_adapter.backend import create
from slurm_adapter.dialects import V0_0_38, V0_0_41
from slurm_adapter.rest import JwtSigner, ScontrolTokens, SlurmRestClient, hs256_token
from tests.unit.builders import slurm_fields

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
ANSWERS: dict[str, Any] = json.loads((FIXTURES / "v0.0.38_answers.json").read_text())
KEY = b"k" * 32


@dataclass
class FakeRest:
    """Serves one canned answer per (method, path); records the requests."""

    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0

    def answer(self, method: str, path: str, case: str) -> None:
        recorded = ANSWERS[case]
        self.answers[(method, path)] = (recorded["status"], recorded["body"])

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.text()
        self.requests.append({"method": request.method, "path": request.path,
                              "headers": dict(request.headers),
                              "json": json.loads(body) if body else None})
        if self.delay:
            await asyncio.sleep(self.delay)
        status, payload = self.answers.get((request.method, request.path), (404, None))
        if isinstance(payload, str) or payload is None:
            return web.Response(status=status, text=payload or "Not Found")
        return web.json_response(payload, status=status)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[FakeRest, str]]:
    fake = FakeRest()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = str(tmp_path / "rest.sock")
    await web.UnixSite(runner, sock).start()
    yield fake, sock
    await runner.cleanup()


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    path = tmp_path / "jwt.key"
    path.write_bytes(KEY)
    return str(path)


def client(sock: str, key_file: str, timeout: float = 5.0) -> SlurmRestClient:
    return SlurmRestClient(V0_0_38, JwtSigner(key_file, 600), socket_path=sock, timeout=timeout)


async def test_submit_acts_as_the_owner_with_a_signed_token(
        server: tuple[FakeRest, str], key_file: str) -> None:
    fake, sock = server
    fake.answer("POST", "/slurm/v0.0.38/job/submit", "submit_ok")
    rest = client(sock, key_file)
    try:
        job_id = await rest.submit("alice", "#!/bin/bash\ntrue\n", {"name": "x"})
    finally:
        await rest.close()
    assert job_id == str(ANSWERS["submit_ok"]["body"]["job_id"])
    sent = fake.requests[0]
    assert sent["headers"]["X-SLURM-USER-NAME"] == "alice"
    claims = jwt.decode(sent["headers"]["X-SLURM-USER-TOKEN"], KEY, algorithms=["HS256"])
    assert claims["sun"] == "alice" and claims["exp"] - claims["iat"] == 600
    assert sent["json"] == {"script": "#!/bin/bash\ntrue\n", "job": {"name": "x"}}


#: Claims PyJWT checks the type of when it encodes (a non-string "iss" is a TypeError).
_REGISTERED = {"iss", "sub", "aud", "exp", "nbf", "iat", "jti"}


@given(claims=st.dictionaries(st.text().filter(lambda k: k not in _REGISTERED),
                              st.text() | st.integers(), max_size=5),
       key=st.binary(min_size=32, max_size=64))
def test_the_daemons_tokens_are_pyjwts(claims: dict[str, Any], key: bytes) -> None:
    """The HS256 signing by hand gives PyJWT's token, byte for byte, and PyJWT reads it."""
    token = hs256_token(claims, key)
    assert token == jwt.encode(claims, key, algorithm="HS256")
    assert jwt.decode(token, key, algorithms=["HS256"],
                      options={"verify_exp": False, "verify_iat": False,
                               "verify_nbf": False, "verify_iss": False,
                               "verify_aud": False, "verify_sub": False,
                               "verify_jti": False}) == claims
    assert hs256_token(claims, key + b"x") != token


async def test_newer_dialect_puts_the_script_in_the_job(
        server: tuple[FakeRest, str], key_file: str) -> None:
    fake, sock = server
    fake.answers[("POST", "/slurm/v0.0.41/job/submit")] = (
        200, {"job_id": 9, "step_id": "batch", "errors": [], "warnings": []})
    rest = SlurmRestClient(V0_0_41, JwtSigner(key_file), socket_path=sock)
    try:
        assert await rest.submit("bob", "S", {"name": "x"}) == "9"
    finally:
        await rest.close()
    assert fake.requests[0]["json"] == {"job": {"name": "x", "script": "S"}}


async def test_a_job_id_beside_errors_is_a_submission(
        server: tuple[FakeRest, str], key_file: str) -> None:
    """Slurm queued the job and said why it cannot start yet (recorded: -N 9)."""
    fake, sock = server
    fake.answer("POST", "/slurm/v0.0.38/job/submit", "submit_queued_with_error")
    rest = client(sock, key_file)
    try:
        job_id = await rest.submit("alice", "S", {})
    finally:
        await rest.close()
    assert job_id == str(ANSWERS["submit_queued_with_error"]["body"]["job_id"])


@pytest.mark.parametrize(("case", "kind", "text"), [
    ("submit_invalid_partition", BackendRejected, "Invalid partition name specified"),
    ("submit_disabled_key", BackendRejected, "Disabled key"),
    ("submit_controller_down", BackendUnavailable, "Unable to contact slurm controller"),
])
async def test_submit_errors(server: tuple[FakeRest, str], key_file: str, case: str,
                             kind: type, text: str) -> None:
    fake, sock = server
    fake.answer("POST", "/slurm/v0.0.38/job/submit", case)
    rest = client(sock, key_file)
    try:
        with pytest.raises(kind, match=text):
            await rest.submit("alice", "S", {})
    finally:
        await rest.close()


@pytest.mark.parametrize(("case", "kind"), [
    ("cancel_unknown", None), ("cancel_finished", None),
    ("cancel_not_owner", BackendRejected), ("cancel_controller_down", BackendUnavailable),
])
async def test_cancel(server: tuple[FakeRest, str], key_file: str, case: str,
                      kind: type | None) -> None:
    fake, sock = server
    fake.answer("DELETE", "/slurm/v0.0.38/job/66", case)
    rest = client(sock, key_file)
    try:
        if kind is None:
            await rest.cancel("alice", "66")
        else:
            with pytest.raises(kind):
                await rest.cancel("alice", "66")
    finally:
        await rest.close()


async def test_jobs_and_their_failures(server: tuple[FakeRest, str], key_file: str) -> None:
    fake, sock = server
    recorded = json.loads((FIXTURES / "v0.0.38_jobs.json").read_text())
    fake.answers[("GET", "/slurm/v0.0.38/jobs")] = (200, recorded)
    rest = client(sock, key_file)
    try:
        assert [slurm_fields(j) for j in (await rest.jobs("root"))["jobs"]] == \
            [slurm_fields(j) for j in recorded["jobs"]]
        for case in ("jobs_controller_down", "jobs_bad_token"):
            fake.answer("GET", "/slurm/v0.0.38/jobs", case)
            with pytest.raises(BackendUnavailable):
                await rest.jobs("root")
        fake.answer("GET", "/slurm/v0.0.38/ping", "ping_ok")
        await rest.ping("root")
        fake.answer("GET", "/slurm/v0.0.38/ping", "ping_controller_down")
        with pytest.raises(BackendUnavailable):
            await rest.ping("root")
    finally:
        await rest.close()


async def test_transport_failures_are_unavailable(server: tuple[FakeRest, str], key_file: str,
                                                  tmp_path: Path) -> None:
    fake, sock = server
    missing = client(str(tmp_path / "nope.sock"), key_file)
    with pytest.raises(BackendUnavailable, match="unreachable"):
        await missing.jobs("root")
    await missing.close()

    fake.answers[("GET", "/slurm/v0.0.38/jobs")] = (502, "Bad Gateway")
    rest = client(sock, key_file)
    try:
        with pytest.raises(BackendUnavailable, match="502"):
            await rest.jobs("root")
        fake.answers[("POST", "/slurm/v0.0.38/job/submit")] = (503, "busy")
        with pytest.raises(BackendUnavailable):
            await rest.submit("alice", "S", {})
    finally:
        await rest.close()

    fake.delay = 1.0
    slow = client(sock, key_file, timeout=0.2)
    try:
        with pytest.raises(BackendUnavailable, match="did not answer"):
            await slow.jobs("root")
    finally:
        await slow.close()


async def test_refused_credentials_drop_the_cached_token(
        server: tuple[FakeRest, str], key_file: str) -> None:
    fake, sock = server
    fake.answers[("GET", "/slurm/v0.0.38/jobs")] = (401, "Authentication failure")
    clock = [1000.0]
    signer = JwtSigner(key_file, 600, clock=lambda: clock[0])
    rest = SlurmRestClient(V0_0_38, signer, socket_path=sock)
    try:
        with pytest.raises(BackendUnavailable, match="refused the credentials"):
            await rest.jobs("root")
        clock[0] += 1
        with pytest.raises(BackendUnavailable):
            await rest.jobs("root")
    finally:
        await rest.close()
    tokens = [r["headers"]["X-SLURM-USER-TOKEN"] for r in fake.requests]
    assert tokens[0] != tokens[1]  # re-signed after the refusal


async def test_jwt_cache_until_near_expiry(key_file: str) -> None:
    clock = [1000.0]
    signer = JwtSigner(key_file, 600, clock=lambda: clock[0])
    first = await signer.token("alice")
    clock[0] += 400
    assert await signer.token("alice") == first
    assert await signer.token("bob") != first
    clock[0] += 100  # 100 s left < margin (120 s)
    assert await signer.token("alice") != first


async def test_missing_key_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="JWT key"):
        await JwtSigner(str(tmp_path / "none")).token("alice")


async def test_scontrol_tokens() -> None:
    calls: list[list[str]] = []

    async def run(argv: list[str]) -> tuple[int, bytes, bytes]:
        calls.append(argv)
        if argv[2] == "username=nobody":
            return 1, b"", b"scontrol: error: Invalid user\n"
        return 0, f"SLURM_JWT=tok-{argv[2]}\n".encode(), b""

    tokens = ScontrolTokens(run, lifespan=900)
    assert await tokens.token("alice") == "tok-username=alice"
    assert await tokens.token("alice") == "tok-username=alice"
    assert calls == [["scontrol", "token", "username=alice", "lifespan=900"]]
    with pytest.raises(BackendUnavailable, match="Invalid user"):
        await tokens.token("nobody")


async def test_an_answers_body_is_not_kept_for_the_cyclic_gc(
        server: tuple[FakeRest, str], key_file: str) -> None:
    """httpx's response and its stream refer to each other: a response that kept its body
    (``resp.content``) held a whole listing (20 MB at 6,000 jobs) until the cyclic GC
    ran. With the GC off, no response left behind holds the listing's bytes."""
    fake, sock = server
    jobs = [{"job_id": i, "name": "x" * 200, "comment": "c"} for i in range(2000)]
    fake.answers[("GET", "/slurm/v0.0.38/jobs")] = (200, {"jobs": jobs, "meta": {}})
    size = len(json.dumps({"jobs": jobs}))
    rest = client(sock, key_file)
    gc.collect()
    gc.disable()
    try:
        listing = await rest.jobs("root")
        assert listing is not None and len(listing["jobs"]) == 2000
        kept = [o for o in gc.get_objects() if type(o) is httpx.Response
                and len(getattr(o, "_content", b"")) >= size]
        assert kept == []
    finally:
        gc.enable()
        await rest.close()


async def test_jobs_not_modified_since(server: tuple[FakeRest, str], key_file: str) -> None:
    """``update_time``: slurmctld answers 304 when no job changed; that is None."""
    fake, sock = server
    fake.answers[("GET", "/slurm/v0.0.38/jobs")] = (304, None)
    rest = client(sock, key_file)
    try:
        assert await rest.jobs("root", changed_since=1_700_000_000) is None
    finally:
        await rest.close()
    assert fake.requests[-1]["path"] == "/slurm/v0.0.38/jobs"


async def test_auto_version_speaks_the_newest_one_both_know(
        server: tuple[FakeRest, str], key_file: str) -> None:
    fake, sock = server
    fake.answers[("GET", "/openapi/v3")] = (200, {"paths": {
        "/slurm/v0.0.41/ping": {}, "/slurm/v0.0.42/ping": {}, "/slurm/v0.0.99/ping": {}}})
    fake.answers[("GET", "/slurm/v0.0.42/ping")] = (200, {"pings": [], "errors": []})
    backend = create("s", {"rest_socket": sock, "jwt_key": key_file})
    try:
        await backend.start()
    finally:
        await backend.close()
    assert backend.rest is not None and backend.rest.dialect.version == "v0.0.42"
    assert [r["path"] for r in fake.requests] == ["/openapi/v3", "/slurm/v0.0.42/ping"]


async def test_auto_version_fails_naming_both_lists(
        server: tuple[FakeRest, str], key_file: str) -> None:
    fake, sock = server
    fake.answers[("GET", "/openapi/v3")] = (200, {"paths": {"/slurm/v0.0.37/ping": {}}})
    backend = create("old", {"rest_socket": sock, "jwt_key": key_file})
    try:
        with pytest.raises(BackendRejected, match=r"slurm back end old: slurmrestd offers "
                                                  r"v0\.0\.37; this bridge speaks v0\.0\.38, "):
            await backend.start()
    finally:
        await backend.close()


async def test_explicit_rest_version_reads_no_openapi_document(
        server: tuple[FakeRest, str], key_file: str) -> None:
    fake, sock = server
    fake.answers[("GET", "/slurm/v0.0.41/ping")] = (200, {"pings": [], "errors": []})
    backend = create("s", {"rest_socket": sock, "jwt_key": key_file, "rest_version": "v0.0.41"})
    try:
        await backend.start()
    finally:
        await backend.close()
    assert [r["path"] for r in fake.requests] == ["/slurm/v0.0.41/ping"]


async def test_nothing_changed_in_the_newer_dialects_is_not_an_empty_listing(
        server: tuple[FakeRest, str], key_file: str) -> None:
    """v0.0.40+ answer an unchanged ``update_time`` poll with 200, no jobs and
    ``last_update`` 0 (seen on 24.11 and 26.05); a real empty listing has a time."""
    fake, sock = server
    rest = SlurmRestClient(V0_0_41, JwtSigner(key_file), socket_path=sock)
    unset = {"set": True, "infinite": False, "number": 0}
    try:
        fake.answers[("GET", "/slurm/v0.0.41/jobs")] = (
            200, {"jobs": [], "last_update": unset, "errors": []})
        assert await rest.jobs("root", changed_since=1000) is None
        listing = {"jobs": [], "last_update": {**unset, "number": 1796101441}, "errors": []}
        fake.answers[("GET", "/slurm/v0.0.41/jobs")] = (200, listing)
        assert await rest.jobs("root", changed_since=1000) == listing
        fake.answers[("GET", "/slurm/v0.0.41/jobs")] = (
            200, {"jobs": [], "last_update": unset, "errors": []})
        assert await rest.jobs("root") == {"jobs": [], "last_update": unset, "errors": []}
    finally:
        await rest.close()


async def test_one_job_is_read_by_its_id(server: tuple[FakeRest, str], key_file: str) -> None:
    """GET /job/{id}: the record whose own id it is (an array's base id answers all of
    the array's records); None for a job Slurm no longer holds (22.05 answers HTTP 500
    with error 2017, as recorded); other failures raise."""
    fake, sock = server
    records = json.loads((FIXTURES / "v0.0.38_jobs.json").read_text())["jobs"][:3]
    ids = [r["job_id"] for r in records]
    fake.answers[("GET", f"/slurm/v0.0.38/job/{ids[1]}")] = (200, {"jobs": records})
    fake.answers[("GET", "/slurm/v0.0.38/job/99999")] = (500, {"jobs": [], "errors": [
        {"description": "Unable to find JobId=99999", "error_number": 2017,
         "error": "Invalid job id specified", "source": "slurm_load_job"}]})
    fake.answer("GET", "/slurm/v0.0.38/job/77777", "jobs_controller_down")
    rest = client(sock, key_file)
    try:
        got = await rest.job("root", ids[1])
        assert got is not None and slurm_fields(got) == slurm_fields(records[1])
        assert await rest.job("root", 99999) is None
        with pytest.raises(BackendUnavailable):
            await rest.job("root", 77777)
        assert fake.requests[0]["path"] == f"/slurm/v0.0.38/job/{ids[1]}"
    finally:
        await rest.close()
