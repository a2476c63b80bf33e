"""``GET /v1/events``: job events for users, without MQTT (a long-poll over the API).

Query: ``since=SEQ`` (events with a larger sequence number; absent: only events from
now on), ``timeout=S`` (seconds to wait when there is none yet, 0-60, default 25),
``limit=N`` (1-1000, default 200). Answer ``{"items": [event], "next": SEQ}``: the
events (the payload of docs/events.md) oldest first, and the ``since`` for the next
call. Without events before the timeout, ``items`` is empty.

Who sees what: the caller sees the events of their own jobs; root sees every job's.
A bad parameter is a 400 naming it. A caller far behind (``since=0`` on a long history
of other users' events) is scanned in windows with the event loop free between two
(:func:`owned_after`), so it cannot hold the daemon for the whole scan.
"""

from __future__ import annotations

import asyncio
import re

from aiohttp import web

from bridge.api_common import OWNER_KEY, SERVICE_KEY
from bridge.errors import BridgeError
from bridge.events import event_payload
from bridge.service import Event, JobService

MAX_WAIT = 60.0
DEFAULT_WAIT = 25.0
MAX_LIMIT = 1000
DEFAULT_LIMIT = 200
_MAX_SEQ = 2**63 - 1
#: Outbox sequence numbers one store query looks at for a caller who is not root.
SCAN_WINDOW = 5000


class BadParameter(BridgeError, ValueError):
    """A query parameter out of its range; the message names it."""


_WHOLE = re.compile(r"-?[0-9]+")


def _whole(query: dict[str, str], name: str, default: int | None, low: int,
           high: int) -> int | None:
    """A whole number written in ASCII digits, taken exactly (sequence numbers go up
    to 2**63-1, beyond a float's 2**53)."""
    raw = query.get(name)
    if raw is None:
        return default
    if _WHOLE.fullmatch(raw) is None:
        raise BadParameter(f"{name}: {raw[:40]!r} is not a whole number")
    value = int(raw)
    if not low <= value <= high:
        raise BadParameter(f"{name}: must be between {low} and {high}")
    return value


def _seconds(query: dict[str, str], name: str, default: float, high: float) -> float:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadParameter(f"{name}: {raw[:40]!r} is not a number") from None
    if not 0 <= value <= high:  # also refuses NaN
        raise BadParameter(f"{name}: must be between 0 and {high:g}")
    return value


#: The parameters of ``/v1/events``; any other is refused, as on every other route.
KNOWN_PARAMETERS = frozenset({"since", "timeout", "limit"})


def parse_query(query: dict[str, str]) -> tuple[int | None, float, int]:
    """``(since, timeout, limit)`` of a ``/v1/events`` query; :class:`BadParameter`
    naming the parameter that is unknown or not a number in its range."""
    unknown = sorted(set(query) - KNOWN_PARAMETERS)
    if unknown:
        raise BadParameter(f"unknown query parameter {unknown[0]!r}; known: "
                           f"{', '.join(sorted(KNOWN_PARAMETERS))}")
    since = _whole(query, "since", None, 0, _MAX_SEQ)
    wait = _seconds(query, "timeout", DEFAULT_WAIT, MAX_WAIT)
    limit = _whole(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    assert limit is not None
    return since, wait, limit


async def owned_after(service: JobService, cursor: int, upto: int, limit: int,
                      owner_uid: int | None, window: int = SCAN_WINDOW
                      ) -> tuple[list[Event], int]:
    """At most ``limit`` events of ``owner_uid``'s jobs (every job's when None) with
    ``cursor < id <= upto``, oldest first, and the sequence number up to which every
    event was looked at. For an owner the ids are scanned ``window`` at a time (the join
    reads every outbox row of the range, other users' too) and the event loop runs
    between two windows: the cost of one caller's scan is not one block of the loop."""
    if owner_uid is None:
        return service.changes(cursor, limit, upto=upto)[0], upto
    while cursor < upto:
        end = min(upto, cursor + window)
        rows, _ = service.changes(cursor, limit, upto=end, owner_uid=owner_uid)
        if rows:
            return rows, end
        cursor = end
        await asyncio.sleep(0)
    return [], max(cursor, upto)


async def list_events(request: web.Request) -> web.Response:
    """The caller's events after ``since``, waiting up to ``timeout`` for the first."""
    try:
        since, wait, limit = parse_query(dict(request.query))
    except BadParameter as exc:
        return web.json_response({"error": str(exc)}, status=400)
    service = request.app[SERVICE_KEY]
    owner = request[OWNER_KEY]
    only = None if owner.uid == 0 else owner.uid
    cursor = service.cursor() if since is None else since
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        newest = service.cursor()
        rows, reached = await owned_after(service, cursor, newest, limit, only)
        if rows:
            following = rows[-1].id if len(rows) == limit else max(cursor, reached)
            return web.json_response({"items": [event_payload(r) for r in rows],
                                      "next": following})
        cursor = max(cursor, newest)  # other users' events: skipped for good
        remaining = deadline - loop.time()
        if remaining <= 0:
            return web.json_response({"items": [], "next": cursor})
        await service.wait_for_changes(cursor, remaining)


def add_routes(app: web.Application) -> None:
    """Serve ``/v1/events`` from ``app`` (made by :func:`bridge.api.make_app`, before
    it starts): the events come from its :class:`JobService`."""
    app.router.add_get("/v1/events", list_events)
