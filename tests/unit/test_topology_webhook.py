"""The TrainJob door's mutating webhook (k8s_adapter/topology_webhook.py): it adds the
patch ``decide`` gives at creation, never refuses, and answers 400/413 to what is no
AdmissionReview."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from k8s_adapter.frontdoor import create
from k8s_adapter.topology_webhook import MAX_BODY, PATH, make_webhook_app, review_answer

PATCHES = [{"manager": "hpc-bridge.io/placement"}]


def review(operation: str = "CREATE", obj: Any = None) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": operation,
                        "object": {"metadata": {"name": "t"}} if obj is None else obj}}


def test_a_created_trainjob_gets_the_patch_decide_gives() -> None:
    seen: list[Any] = []

    def decide(obj: dict[str, Any]) -> list[dict[str, Any]]:
        seen.append(obj)
        return PATCHES
    answer = review_answer(review(), decide)
    assert answer["kind"] == "AdmissionReview" and seen == [{"metadata": {"name": "t"}}]
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/spec/runtimePatches", "value": PATCHES}]


@pytest.mark.parametrize("rev", [review("UPDATE"), review("DELETE"), review(obj=[1])])
def test_other_operations_and_objects_pass_unchanged(rev: dict[str, Any]) -> None:
    def decide(obj: dict[str, Any]) -> list[dict[str, Any]]:
        raise AssertionError("not asked")
    assert review_answer(rev, decide)["response"] == {"uid": "u-1", "allowed": True}


def test_no_patch_and_a_failing_decision_still_allow() -> None:
    assert review_answer(review(), lambda obj: None)["response"] == {
        "uid": "u-1", "allowed": True}

    def broken(obj: dict[str, Any]) -> list[dict[str, Any]]:
        raise KeyError("bug")
    assert review_answer(review(), broken)["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("bad", [[], {"kind": "AdmissionReview"},
                                 {"kind": "Other", "request": {"uid": "x"}},
                                 {"kind": "AdmissionReview", "request": {"uid": 3}}])
def test_what_is_no_review_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="AdmissionReview"):
        review_answer(bad, lambda obj: PATCHES)


async def test_the_server_answers_reviews_and_refuses_junk() -> None:
    async with TestClient(TestServer(make_webhook_app(lambda obj: PATCHES))) as client:
        ok = await client.post(PATH, json=review())
        assert ok.status == 200 and (await ok.json())["response"]["patchType"] == "JSONPatch"
        for body in (b"{", b"[1]", b'{"a": NaN}', b"\xff", json.dumps({"kind": "x"}).encode()):
            bad = await client.post(PATH, data=body)
            assert bad.status == 400, body
            assert "not an AdmissionReview" in (await bad.json())["error"]
        big = await client.post(PATH, data=b" " * (MAX_BODY + 1))
        assert big.status == 413


@pytest.mark.parametrize(("settings", "message"), [
    ({"webhook_listen": "127.0.0.1:9443"}, "needs webhook_tls_cert and webhook_tls_key"),
    ({"webhook_listen": "127.0.0.1", "webhook_tls_cert": "c", "webhook_tls_key": "k"},
     "must be HOST:PORT"),
])
def test_a_webhook_needs_tls_and_a_port(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create("k8s", settings)
