"""k8s_adapter.kube.lean_session: the apiserver's proxy is looked up once, the
session stops reading the environment per request, and the answer is aiohttp's own."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from k8s_adapter.kube import lean_session

HOST = "https://apiserver.example:6443"
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY",
              "no_proxy", "ALL_PROXY", "all_proxy", "NETRC")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    yield


def leaned(proxy: str | None = None) -> tuple[Any, bool]:
    """(the rest client after lean_session, its session's trust_env before)."""
    async def go() -> tuple[Any, bool]:
        cfg = client.Configuration(host=HOST)
        cfg.proxy = proxy
        api = client.ApiClient(cfg)
        rest = api.rest_client
        before = rest.pool_manager.trust_env
        lean_session(rest, cfg.host)
        await api.close()
        return rest, before
    return asyncio.run(go())


def test_the_session_no_longer_reads_the_environment_per_request() -> None:
    rest, before = leaned()
    assert before is True  # kubernetes_asyncio's own choice, which this undoes
    assert rest.pool_manager.trust_env is False
    assert rest.proxy is None


def test_a_proxy_from_the_environment_is_kept_with_its_credentials(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:s3cret@proxy.example:3128")
    rest, _ = leaned()
    assert rest.proxy == "http://proxy.example:3128"
    expected = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert rest.proxy_headers == {"Proxy-Authorization": expected}


def test_proxy_credentials_from_netrc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine proxy.example login bob password pw\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    rest, _ = leaned()
    assert rest.proxy == "http://proxy.example:3128"
    assert rest.proxy_headers == {
        "Proxy-Authorization": "Basic " + base64.b64encode(b"bob:pw").decode()}


def test_no_proxy_for_the_apiserver_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.example")
    rest, _ = leaned()
    assert rest.proxy is None
    assert rest.pool_manager.trust_env is False


def test_a_proxy_the_kubeconfig_names_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    rest, _ = leaned(proxy="http://kubeconfig-proxy.example:8080")
    assert rest.proxy == "http://kubeconfig-proxy.example:8080"
    assert not rest.proxy_headers


class FakeResponse:
    """What the client returns with ``_preload_content=False``: aiohttp's response."""

    def __init__(self, status: int, body: bytes, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        self.headers: dict[str, str] = {"Content-Type": "application/json"}
        self._body = body
        self.released = False

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        self.released = True


def raw_answer(status: int, body: dict[str, Any]) -> tuple[Any, FakeResponse]:
    """(what Kube.raw returned or raised, the response) for one answer."""
    from k8s_adapter.kube import Kube, KubeSettings

    resp = FakeResponse(status, json.dumps(body).encode(), reason="Not Found")

    async def fn(*args: Any, _preload_content: bool = True, **kwargs: Any) -> FakeResponse:
        assert _preload_content is False
        return resp

    async def go() -> Any:
        try:
            return await Kube(KubeSettings()).raw("get ClusterTrainingRuntime x", fn)
        except Exception as exc:  # the test looks at what it is
            return exc
    return asyncio.run(go()), resp


def test_raw_decodes_a_2xx_answer() -> None:
    got, resp = raw_answer(200, {"kind": "List", "items": [{"a": 1}]})
    assert got == {"kind": "List", "items": [{"a": 1}]}
    assert resp.released


@pytest.mark.parametrize(("status", "error"), [
    (404, "KubeRejected"), (403, "BackendUnavailable"), (429, "BackendUnavailable"),
    (500, "BackendUnavailable")])
def test_raw_raises_for_an_error_status_instead_of_returning_it(status: int,
                                                                error: str) -> None:
    # Before: the Status object came back as if it were the object or listing (a
    # listing with no items: every JobSet looked gone).
    status_obj = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "message": 'clustertrainingruntimes "x" not found', "code": status}
    got, resp = raw_answer(status, status_obj)
    assert type(got).__name__ == error, got
    assert resp.released
    if status == 404:
        assert 'clustertrainingruntimes "x" not found' in str(got)
