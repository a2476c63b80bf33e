"""``GET /v1/jobs`` as text (bridge/api_table.py): squeue's default table, streamed,
the same lines tqueue formats from the JSON listing."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bridge import api_table
from bridge.cli.queue_format import fold_pending
from bridge.cli.tqueue import format_queue
from bridge.model import ANN_SCHEDULING
from tests.unit.conftest import Answer, ApiClient
from tests.unit.test_api import submit

TEXT = {"Accept": "text/plain"}


async def table(api: ApiClient, query: str = "", user: str = "alice") -> Answer:
    answer = await api.call("GET", f"/v1/jobs{query}", user=user, headers=TEXT)
    assert answer.status == 200, answer
    assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
    return answer


def formatted(api_json: Answer, fold: bool = True) -> str:
    views = api_json.body["items"]
    return format_queue(fold_pending(views) if fold else views, header=False,
                        now=datetime.now(UTC))


async def test_the_table_is_the_json_listing_formatted(api_client: ApiClient) -> None:
    mine = await submit(api_client, "mine")
    await submit(api_client, "theirs", user="bob")
    await submit(api_client, "gone")
    await api_client.call("POST", f"/v1/jobs/{mine.body['id']}/cancel")
    for query in ("", "?states=all", "?user=bob", "?states=Cancelled", "?backend=none"):
        text = (await table(api_client, query)).body.decode()
        listed = await api_client.call("GET", f"/v1/jobs{query}")
        assert text == formatted(listed), query
    assert len((await table(api_client, "?states=all")).body.decode().splitlines()) == 3
    assert (await table(api_client, "?backend=none")).body == b""


async def test_a_table_longer_than_a_piece_keeps_every_job_once(
        api_client: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_table, "PAGE", 2)
    ids = [(await submit(api_client, f"j{i}")).body["id"] for i in range(5)]
    lines = (await table(api_client)).body.decode().splitlines()
    assert [int(line.split()[0]) for line in lines] == ids


async def test_json_unless_text_alone_is_asked_for(api_client: ApiClient) -> None:
    await submit(api_client)
    for accept in ("application/json", "text/plain, application/json", "*/*", ""):
        answer = await api_client.call("GET", "/v1/jobs", headers={"Accept": accept})
        assert answer.status == 200 and "items" in answer.body, accept
    answer = await api_client.call("GET", "/v1/jobs",
                                   headers={"Accept": "text/html, TEXT/PLAIN;q=0.9"})
    assert answer.headers["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize(("query", "message"), [
    ("?array=maybe", "array must be one of"),
    ("?limit=5", "unknown query parameter 'limit'; known: array, backend, states, user"),
    ("?continue=x", "unknown query parameter 'continue'"),
    ("?states=Sleeping", "unknown state in 'Sleeping'"),
    ("?user=a&user=b", "query parameter 'user' given more than once"),
])
async def test_a_bad_table_query_is_a_400(api_client: ApiClient, query: str,
                                          message: str) -> None:
    answer = await api_client.call("GET", f"/v1/jobs{query}", headers=TEXT)
    assert answer.status == 400 and answer.error.startswith(message), answer


async def test_array_shows_each_task(api_client: ApiClient) -> None:
    await submit(api_client, "sweep",
                 annotations={ANN_SCHEDULING: json.dumps({"array": "0-5%2"})})
    folded = (await table(api_client)).body.decode().splitlines()
    each = (await table(api_client, "?array=1")).body.decode().splitlines()
    listed = await api_client.call("GET", "/v1/jobs")
    assert len(each) == 6 and len(folded) < 6
    assert "\n".join(folded) + "\n" == formatted(listed)
    assert "\n".join(each) + "\n" == formatted(listed, fold=False)


async def test_the_loop_serves_other_work_between_pieces(
        api_client: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp's write returns at once while the socket takes the bytes: the handler must
    let the loop run between pieces, or a fast reader holds it for the whole table."""
    monkeypatch.setattr(api_table, "PAGE", 2)
    for i in range(6):
        await submit(api_client, f"j{i}")
    ticks = 0
    seen: list[int] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    def render(rows: Any, now: float, *, fold: bool = True) -> str:
        seen.append(ticks)
        return real(rows, now, fold=fold)

    real = api_table.render
    monkeypatch.setattr(api_table, "render", render)
    task = asyncio.create_task(ticker())
    try:
        await table(api_client)
    finally:
        task.cancel()
    assert len(seen) == 3 and seen[0] < seen[1] < seen[2], seen
