"""The API client's retried submissions: the same Idempotency-Key when an answer is
lost, no retry of a refusal, and a 429 asked again after its Retry-After."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from bridge import client as client_module
from bridge.client import BridgeClientError
from tests.unit.client_helpers import FakeDaemon, Override, _answer, _client, _tcp
from tests.unit.client_helpers import daemon as daemon


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
    monkeypatch.setattr(client_module.time, "sleep", slept.append)  # type: ignore[attr-defined]
    answer, calls = _busy_then({"id": 5, "uid": "u", "name": "n", "state": "Pending"}, 2)
    daemon.override = answer
    with _client(daemon) as client:
        assert client.submit({"kind": "TrainJob"}).id == 5
    assert slept == [2.0, 2.0] and len(calls) == 3


def test_a_429_is_given_up_after_the_retries_or_a_long_wait(
        daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", slept.append)  # type: ignore[attr-defined]
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
