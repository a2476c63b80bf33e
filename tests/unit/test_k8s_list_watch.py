"""k8s_adapter.kube.Kube.list_watch over a fake apiserver answer: the listing, then the
watch's lines decoded by the bridge's own decoder (msgspec), resumed from the last
resourceVersion, and the client's own errors for an ERROR event (410: listed again)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from k8s_adapter import kube
from k8s_adapter.kube import Kube, KubeSettings


class Answer:
    """An aiohttp response as kubernetes_asyncio reads it: a body (a list call) or
    lines (a watch), then nothing more until cancelled."""

    def __init__(self, body: dict[str, Any] | None = None,
                 lines: list[dict[str, Any] | str] | None = None):
        self.status = 200
        self._body = json.dumps(body or {}).encode()
        self._lines = [(x if isinstance(x, str) else json.dumps(x)).encode() + b"\n"
                       for x in lines or []]
        self.content = self

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def readline(self) -> bytes:
        if self._lines:
            return self._lines.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("not reached")


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "resourceVersion": rv},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


def run(answers: list[Answer], take: int) -> tuple[list[tuple[str, Any]], list[dict[str, Any]]]:
    """(the first ``take`` items list_watch yields, the keyword arguments of each call)."""
    calls: list[dict[str, Any]] = []

    async def list_fn(**kwargs: Any) -> Answer:
        """A client list call (its docstring: a watchable list of pods)."""
        calls.append(kwargs)
        return answers.pop(0)

    async def go() -> list[tuple[str, Any]]:
        got: list[tuple[str, Any]] = []
        stream = Kube(KubeSettings()).list_watch("pods", list_fn, label_selector="x=y")
        async for item in stream:
            got.append(item)
            if len(got) == take:
                break
        await stream.aclose()
        return got
    return asyncio.run(asyncio.wait_for(go(), 10)), calls


def test_events_are_decoded_as_plain_objects_and_the_watch_resumes_from_the_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[object] = []
    real = kube.decode_json

    def counted(data: str | bytes) -> object:
        decoded.append(data)
        return real(data)
    monkeypatch.setattr(kube, "decode_json", counted)
    listing = {"kind": "PodList", "metadata": {"resourceVersion": "10"},
               "items": [pod("a", "9")]}
    got, calls = run([Answer(listing), Answer(lines=[
        {"type": "ADDED", "object": pod("b", "11")},
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "15"}}},
        {"type": "MODIFIED", "object": pod("b", "16")},
        {"type": "DELETED", "object": pod("a", "17")}])], 4)
    assert got == [("SYNC", [pod("a", "9")]), ("ADDED", pod("b", "11")),
                   ("MODIFIED", pod("b", "16")), ("DELETED", pod("a", "17"))]
    assert calls[0] == {"label_selector": "x=y", "_preload_content": False}
    assert calls[1]["resource_version"] == "10" and calls[1]["watch"] is True
    assert len(decoded) == 5  # the listing and each line: the bridge's decoder, not json's


def test_an_expired_watch_lists_again() -> None:
    """An ERROR event is the client's to raise (410 Gone here): listed again."""
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                        "message": "too old resource version"}}
    got, calls = run([Answer({"metadata": {"resourceVersion": "10"}, "items": []}),
                      Answer(lines=[gone]),
                      Answer({"metadata": {"resourceVersion": "30"}, "items": [pod("c", "29")]}),
                      Answer(lines=[{"type": "ADDED", "object": pod("d", "31")}])], 3)
    assert got == [("SYNC", []), ("SYNC", [pod("c", "29")]), ("ADDED", pod("d", "31"))]
    assert [c.get("resource_version") for c in calls] == [None, "10", None, "30"]


def test_a_line_that_is_not_json_is_skipped() -> None:
    got, _ = run([Answer({"metadata": {"resourceVersion": "1"}, "items": []}),
                  Answer(lines=["not json", {"type": "ADDED", "object": pod("e", "2")}])], 2)
    assert got == [("SYNC", []), ("ADDED", pod("e", "2"))]
