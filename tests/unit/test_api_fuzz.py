"""Hostile input against every API route, in process: aiohttp's test client against
:func:`bridge.api.make_app` with a real :class:`Engine` and :class:`Store` (a temp dir;
the reconcile loop does not run). Each case gets a 4xx with a JSON ``error`` message or
a correct answer, never a 5xx, an exception or a hang (tests/hostile.py: budget, seed).
The TCP listener is the one served, so the ``Authorization`` header is fuzzed too."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from bridge.api import make_app
from bridge.backend import Owner
from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.limits import LimitSettings
from bridge.runtimes import RuntimeCatalog
from bridge.service import JobService
from bridge.store import Store
from slurm_adapter.backend import create as slurm_backend
from tests.hostile import (
    ANY_CHAR,
    CASE_TIMEOUT,
    HOSTILE_WORDS,
    QUERIES,
    REF_ROUTES,
    assert_refused_or_ok,
    cases,
    follows,
    mutated_trainjobs,
    quoted,
    raw_bodies,
    trainjobs,
    url_query,
    within_case_timeout,
)

USERS = {"tok-alice": Owner(1001, 1001, "alice"), "tok-bob": Owner(1002, 1002, "bob"),
         "tok-root": Owner(0, 0, "root")}


class Api:
    """A served app and a loop to call it from synchronous hypothesis tests."""

    def __init__(self, state_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        store = Store.open(state_dir / "bridge.sqlite")
        self.engine = Engine(store, {"slurm": slurm_backend("slurm", {})}, RuntimeCatalog(),
                             EngineSettings(default_backend="slurm"))
        # The per-user limits are off here: they are tested on their own
        # (tests/unit/test_limits.py, tests/integration/test_fair_share.py), and this
        # suite sends thousands of requests a second as one user.
        app = make_app(JobService(self.engine, EventFeed(store)), USERS, LimitSettings(
            max_active_jobs=0, submit_rate=0, max_concurrent_requests=0, request_rate=0))

        async def start() -> TestClient[Any, Any]:
            client: TestClient[Any, Any] = TestClient(TestServer(app))
            await client.start_server()
            return client

        self.client = self.loop.run_until_complete(start())

    def call(self, method: str, path: str, *, token: str | None = "tok-alice",
             body: bytes | None = None, headers: dict[str, str] | None = None,
             head_only: bool = False) -> tuple[int, bytes, str]:
        """One request: (status, body, content type). A hang past CASE_TIMEOUT fails.
        ``head_only``: a stream (``follow``): the body is not awaited when it is a 200."""
        sent = dict(headers or {})
        if token is not None:
            sent.setdefault("Authorization", f"Bearer {token}")

        async def go() -> tuple[int, bytes, str]:
            async with self.client.request(method, path, data=body, headers=sent) as resp:
                if head_only and resp.status == 200:
                    return resp.status, b"", resp.content_type
                return resp.status, await resp.read(), resp.content_type

        with within_case_timeout(CASE_TIMEOUT + 5):  # even if the loop itself is stuck
            return self.loop.run_until_complete(asyncio.wait_for(go(), CASE_TIMEOUT))

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    served = Api(tmp_path_factory.mktemp("api"))
    yield served
    served.close()


def check_submit(api: Api, body: bytes, doc: Any = None) -> None:
    status, raw, ctype = api.call("POST", "/v1/jobs", body=body,
                                  headers={"Content-Type": "application/json"})
    answer = assert_refused_or_ok(status, raw, ctype)
    if status >= 400:
        return
    assert status == 201, (status, raw)
    assert answer["state"] in ("Pending", "Suspended"), answer
    shown = api.call("GET", f"/v1/jobs/{answer['id']}")
    assert shown[0] == 200, shown
    view = json.loads(shown[1])
    assert (view["uid"], view["name"]) == (answer["uid"], answer["name"])
    assert view["user"] == "alice" and view["unixUid"] == 1001
    if isinstance(doc, dict):  # the stored job is the one sent
        assert view["trainJob"]["spec"]["runtimeRef"]["name"] == (
            doc["spec"]["runtimeRef"]["name"])
        assert view["state"] == ("Suspended" if doc["spec"].get("suspend") else "Pending")


@cases(3)
@given(mutated_trainjobs())
def test_submitted_documents(api: Api, doc: Any) -> None:
    check_submit(api, json.dumps(doc).encode(), doc)


@cases(3)
@given(raw_bodies())
def test_submitted_bytes(api: Api, body: bytes) -> None:
    check_submit(api, body)


#: tbatch's words: options it knows (with and without values), hostile text.
_SBATCH_WORDS = st.one_of(
    st.sampled_from(["-N", "2", "-N2-", "--nodes=0", "-p", "--wrap", "-f", "--parsable",
                     "--export=NONE,A", "--array=1-3", "--exclusive=x", "-o", "%j.%", "--",
                     "-", "job.sh", "--begin=now+1", "--mail-user=-x", "--comment", "-J"]),
    st.sampled_from(HOSTILE_WORDS), st.text(alphabet=ANY_CHAR, max_size=8))
_SBATCH_TEXT = st.one_of(st.text(alphabet=ANY_CHAR, max_size=40),
                         st.builds(lambda b: {"base64": b}, st.text(max_size=12)),
                         st.sampled_from(["#!/bin/sh\n#SBATCH -N 2\ntrue\n",
                                          "#!/bin/sh\n#SBATCH --bogus\n", "kind: TrainJob"]))
_SBATCH_BODIES = st.fixed_dictionaries(
    {"argv": st.lists(st.one_of(_SBATCH_WORDS, st.just({"base64": "/w=="})), max_size=6)},
    optional={"cwd": _SBATCH_TEXT, "environ": st.dictionaries(
                  st.one_of(st.sampled_from(["SBATCH_PARTITION", "SBATCH_TIMELIMIT",
                                             "SBATCH_EXPORT", "PATH"]), st.text(max_size=6)),
                  _SBATCH_TEXT, max_size=3),
              "script": st.one_of(st.none(), _SBATCH_TEXT),
              "file": st.one_of(st.none(), _SBATCH_TEXT),
              "scriptProblem": st.sampled_from(["unreadable", "too-large", "x"])})


@cases(3)
@given(st.one_of(_SBATCH_BODIES, st.dictionaries(st.text(max_size=8), _SBATCH_TEXT, max_size=3)))
def test_sbatch_submissions(api: Api, body: dict[str, Any]) -> None:
    """``POST /v1/sbatch`` (tbatch's arguments, script and environment, parsed in the
    daemon): any body is a job or a 4xx naming what is wrong, never a 5xx or a hang."""
    status, raw, ctype = api.call("POST", "/v1/sbatch", body=json.dumps(body).encode(),
                                  headers={"Content-Type": "application/json"})
    answer = assert_refused_or_ok(status, raw, ctype)
    if status < 400:
        assert status == 201 and isinstance(answer["parsable"], bool), (status, raw)


@cases(0.5)
@given(trainjobs(), st.sampled_from([None, "application/json; charset=bogus", "text/plain",
                                     "application/json; charset=latin-1",
                                     "multipart/form-data; boundary=x"]))
def test_content_types_do_not_matter(api: Api, doc: dict[str, Any], ctype: str | None
                                     ) -> None:
    """A body is UTF-8 JSON whatever the header says (RFC 8259)."""
    doc["metadata"].pop("name", None)  # no name collisions: this one must be admitted
    status, raw, _ = api.call("POST", "/v1/jobs", body=json.dumps(doc).encode(),
                              headers={"Content-Type": ctype} if ctype else {})
    assert status == 201, raw


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """An app with few jobs (listing thousands would make each case slow)."""
    served = Api(tmp_path_factory.mktemp("small"))
    yield served
    served.close()


@pytest.fixture(scope="module")
def jobs(small: Api) -> list[dict[str, Any]]:
    """A few jobs of alice's (with a script and an environment) to aim at."""
    api = small
    made = []
    for i in range(3):
        doc = {"metadata": {"name": f"target-{i}", "annotations": {
                   "hpc-bridge.io/batch-script": "#!/bin/sh\necho secret\n"}},
               "spec": {"runtimeRef": {"name": "plain"}, "suspend": i == 2,
                        "trainer": {"command": ["true"],
                                    "env": [{"name": "SECRET", "value": "s3cret"}]}}}
        status, raw, _ = api.call("POST", "/v1/jobs", body=json.dumps(doc).encode())
        assert status == 201, raw
        made.append(json.loads(raw))
    return made


@cases(2.5)
@given(st.data(), st.sampled_from(REF_ROUTES), QUERIES,
       st.sampled_from(["tok-alice", "tok-bob", "tok-root"]))
def test_job_routes(small: Api, jobs: list[dict[str, Any]], data: st.DataObject,
                    route: tuple[str, str], query: list[tuple[str, str]], token: str) -> None:
    target = data.draw(st.sampled_from(jobs))
    ref = data.draw(st.one_of(
        st.sampled_from([str(target["id"]), target["uid"], target["name"]]),
        st.sampled_from(HOSTILE_WORDS).filter(bool), st.text(alphabet=ANY_CHAR, min_size=1,
                                                            max_size=20)))
    method, suffix = route
    path = f"/v1/jobs/{quoted(ref)}{suffix}{url_query(query)}"
    status, raw, ctype = small.call(method, path, token=token, head_only=follows(query))
    answer = assert_refused_or_ok(status, raw, ctype)
    if status < 400 and suffix != "/log":
        owner = answer["unixUid"]
        if token == "tok-bob" and owner != 1002:
            assert method == "GET", ("bob changed another user's job", answer)
            tj = answer["trainJob"]
            assert "s3cret" not in json.dumps(tj) and "echo secret" not in json.dumps(tj)


@cases(1.5)
@given(QUERIES, st.sampled_from(["tok-alice", "tok-bob", "tok-root"]))
def test_listing(small: Api, jobs: list[dict[str, Any]], query: list[tuple[str, str]],
                 token: str) -> None:
    status, raw, ctype = small.call("GET", "/v1/jobs" + url_query(query), token=token)
    answer = assert_refused_or_ok(status, raw, ctype)
    if status < 400:
        assert isinstance(answer["items"], list)


_HEADER_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                              exclude_characters="\x7f")


@cases(1)
@given(st.one_of(
    st.sampled_from(["Bearer tok-alice", "bearer tok-alice", "Bearer  tok-alice ",
                     "Bearertok-alice", "Basic dG9rLWFsaWNl", "Bearer ", "Bearer tok-alic",
                     "Bearer tok-alice\u00e9", "Bearer tök-alice"]),
    st.text(alphabet=_HEADER_CHARS, max_size=30),
    st.builds(lambda t: "Bearer " + t, st.text(alphabet=_HEADER_CHARS, max_size=30))),
    st.sampled_from([("GET", "/v1/jobs"), ("GET", "/v1/healthz"), ("POST", "/v1/jobs"),
                     ("GET", "/v1/jobs/1"), ("PUT", "/v1/jobs"), ("GET", "/v2")]))
def test_authorization_header(api: Api, header: str, route: tuple[str, str]) -> None:
    method, path = route
    status, raw, ctype = api.call(method, path, token=None, body=b"{}" if method != "GET"
                                  else None, headers={"Authorization": header})
    assert_refused_or_ok(status, raw, ctype)
    scheme, _, credentials = header.strip().partition(" ")
    # The scheme is case-insensitive (RFC 7235); the token itself is not.
    if scheme.lower() != "bearer" or credentials.strip() != "tok-alice":
        assert status == 401, (header, status, raw)


# --- each bug the suite found, as a plain example -------------------------------------

@pytest.mark.parametrize(("body", "words"), [
    (b"\xff\xfe{}", "not UTF-8: byte 0xff at offset 0"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64"),
    (json.dumps({"spec": {"runtimeRef": {"name": "plain"}, "x": json.loads(
        "[" * 500 + "]" * 500)}}).encode(), "spec.x[0]"),
    (b'{"metadata": {"namespace": "\\ud800"}, "spec": {}}', "metadata.namespace: not valid"),
    (b'{"metadata": {"n": NaN}, "spec": {}}', "NaN is not a JSON number"),
    (b'{"metadata": {"n": 1e999}, "spec": {}}', "metadata.n: inf"),
    (b'{"spec": {"activeDeadlineSeconds": 99999999999999999999}}',
     "spec.activeDeadlineSeconds: integer out of range"),
    (b'["a"]', "must be a JSON object (a TrainJob), got an array"),
    (b'{"metadata": {"namespace": "../x"}, "spec": {"runtimeRef": {"name": "plain"}, '
     b'"trainer": {"command": ["true"]}}}', "metadata.namespace: must be a DNS-1123"),
    # The scheduling annotation, JSON inside a string: the same decoder (was a 500).
    (json.dumps({"metadata": {"annotations": {"hpc-bridge.io/scheduling": "[" * 100_000}},
                 "spec": {"runtimeRef": {"name": "plain"}}}).encode(),
     "scheduling]: nested deeper than 64"),
    (json.dumps({"metadata": {"annotations": {"hpc-bridge.io/scheduling": '{"x": NaN}'}},
                 "spec": {"runtimeRef": {"name": "plain"}}}).encode(),
     "NaN is not a JSON number"),
    (json.dumps({"metadata": {"annotations": {"hpc-bridge.io/scheduling":
                                              '{"exclude": "node[1-"}'}},
                 "spec": {"runtimeRef": {"name": "plain"},
                          "trainer": {"command": ["true"]}}}).encode(),
     "scheduling].exclude: unbalanced brackets"),
])
def test_bad_bodies_name_what_is_wrong(api: Api, body: bytes, words: str) -> None:
    status, raw, _ = api.call("POST", "/v1/jobs", body=body)
    assert status == 400 and words in json.loads(raw)["error"], raw


@pytest.mark.parametrize(("method", "path", "status", "words"), [
    ("GET", "/v1/jobs/99999999999999999999999", 404, "not found"),
    ("GET", "/v1/jobs/%C2%B2", 404, "not found"),
    ("GET", "/v1/jobs?state=Running", 400, "unknown query parameter 'state'"),
    ("GET", "/v1/jobs?user=a&user=b", 400, "more than once"),
    ("GET", "/v1/jobs/1/log?offset=-1", 400, "offset"),
    ("GET", "/v1/jobs/1/log?offset=%D9%A1", 400, "offset"),
    ("GET", "/v1/jobs/1/log?follow=maybe", 400, "follow"),
    ("GET", "/v1/nowhere", 404, "no such route: GET /v1/nowhere"),
    ("PUT", "/v1/jobs", 405, "allowed: GET, HEAD, POST"),
])
def test_bad_requests_name_what_is_wrong(small: Api, jobs: list[dict[str, Any]], method: str,
                                         path: str, status: int, words: str) -> None:
    got, raw, _ = small.call(method, path)
    assert got == status and words in json.loads(raw)["error"], raw


def test_a_body_over_the_limit_is_a_json_413(api: Api) -> None:
    status, raw, _ = api.call("POST", "/v1/jobs", body=b" " * (8 * 1024 * 1024 + 1))
    assert status == 413 and "limits.max_request_bytes" in json.loads(raw)["error"]
