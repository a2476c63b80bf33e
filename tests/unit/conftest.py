"""Fixtures several tests/unit modules use: a served API (:func:`api_client`) over a real
store and engine with :class:`tests.unit.fakes.FakeBackend`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDictProxy

from bridge.api import make_app
from bridge.backend import Owner
from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.limits import LimitSettings
from bridge.runtimes import RuntimeCatalog
from bridge.service import JobService
from bridge.store import Store
from tests.unit.builders import ALICE, BOB, inventory
from tests.unit.fakes import FakeBackend

ROOT = Owner(uid=0, gid=0, user="root")
#: Bearer tokens of the served API: the user's name is the token.
TOKENS = {"alice": ALICE, "bob": BOB, "root": ROOT}


@dataclass
class Answer:
    """One API answer: status, headers and body (decoded JSON when it is JSON)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: Any

    @property
    def error(self) -> str:
        """The ``error`` message of a refusal."""
        message = self.body["error"]
        assert isinstance(message, str)
        return message


@dataclass
class ApiClient:
    """The API served in process (TCP, so callers are named by bearer token), with the
    engine, store and back end behind it."""

    client: TestClient[Any, Any]
    engine: Engine
    backend: FakeBackend

    @property
    def store(self) -> Store:
        return self.engine.store

    async def call(self, method: str, path: str, *, user: str | None = "alice",
                   doc: Any = None, body: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> Answer:
        """Send a request as ``user`` (``None``: no credentials) with ``doc`` as its
        JSON body (or the raw ``body``)."""
        sent = dict(headers or {})
        if user is not None:
            sent["Authorization"] = f"Bearer {user}"
        if doc is not None:
            body = json.dumps(doc).encode()
            sent.setdefault("Content-Type", "application/json")
        async with self.client.request(method, path, data=body, headers=sent) as resp:
            raw = await resp.read()
            decoded: Any = json.loads(raw) if resp.content_type == "application/json" else raw
            return Answer(resp.status, resp.headers, decoded)


@pytest.fixture
def api_limits() -> LimitSettings:
    """The per-user limits of :func:`api_client`: the defaults. A test sets others with
    ``@pytest.mark.parametrize("api_limits", [LimitSettings(...)])``."""
    return LimitSettings()


@pytest.fixture
async def api_client(tmp_path: Path, api_limits: LimitSettings) -> AsyncIterator[ApiClient]:
    """The API of :func:`bridge.api.make_app` over a store in ``tmp_path`` and an engine
    whose only back end (``slurm``) is a :class:`FakeBackend`; the reconcile loop does
    not run (a test drives it with :func:`tests.unit.fakes.settle`)."""
    backend = FakeBackend(inventory())
    engine = Engine(Store.open(tmp_path / "bridge.sqlite"), {"slurm": backend},
                    RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    app = make_app(JobService(engine, EventFeed(engine.store)), dict(TOKENS), api_limits)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield ApiClient(client, engine, backend)
    finally:
        await client.close()
        engine.store.close()
