"""``GET /v1/jobs`` as squeue's default table: what ``tqueue`` prints without ``-o``,
``-O`` or ``--json``, rendered here (:mod:`bridge.queue_table`) and streamed.

Asked for with ``Accept: text/plain`` (and no ``application/json`` in it: a client that
takes either gets JSON). Query: ``states`` (as the JSON listing: unfinished jobs
without it, ``all``), ``user``, ``backend``, and ``array=1`` for one line per task of a
job array (``tqueue -r``; else an array's pending tasks are one line, ``A_[4-31%4]``).
``limit`` and ``continue`` are the JSON listing's and are refused here: the table is one
answer, sent in chunked pieces of :data:`PAGE` jobs, oldest first, each written as it
is read. The event loop serves other work between pieces, and a reader that stops
reading holds only its own request (aiohttp waits for the socket to drain); one that
goes away ends it quietly.

Contract: 200 ``text/plain; charset=utf-8`` with the table's lines and no header
(:data:`bridge.queue_table.HEADER` is the client's to print); a bad query is a 400 as
the JSON listing's are. A job that changes while the table is sent is shown as it was
when its piece was read.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from bridge.api_common import DEFAULT_PAGE, SERVICE_KEY, listing_states, query_params
from bridge.model import ValidationError
from bridge.queue_table import render

__all__ = ["PAGE", "list_table", "wants_table"]

#: Jobs read and rendered per piece of the answer: the JSON listing's default page, so
#: that an array's pending tasks fold over the same pages as tqueue folds them there.
PAGE = DEFAULT_PAGE

_FLAGS = {"0": False, "1": True, "false": False, "true": True, "no": False, "yes": True}


def wants_table(request: web.Request) -> bool:
    """Whether the request's ``Accept`` asks for text and not for JSON."""
    accepted = {part.split(";", 1)[0].strip().lower()
                for part in request.headers.get("Accept", "").split(",")}
    return "text/plain" in accepted and "application/json" not in accepted


async def list_table(request: web.Request) -> web.StreamResponse:
    """The table (module contract)."""
    service = request.app[SERVICE_KEY]
    query = query_params(request, frozenset({"states", "user", "backend", "array"}))
    states = listing_states(query.get("states"))
    array = query.get("array", "0").lower()
    if array not in _FLAGS:
        raise ValidationError([("", f"array must be one of {', '.join(_FLAGS)}, "
                                    f"got {array!r}")])
    fold = not _FLAGS[array]
    user, backend = query.get("user"), query.get("backend")
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    await response.prepare(request)
    after: int | None = None
    try:
        while True:
            rows, after = service.table_rows(states, user=user, backend=backend,
                                             after_id=after, limit=PAGE)
            if rows:
                await response.write(render(rows, time.time(), fold=fold).encode())
            if after is None:
                break
            # aiohttp's write returns at once while the socket takes the bytes: without
            # this a fast reader would have the whole table rendered in one go, the loop
            # serving nothing else meanwhile.
            await asyncio.sleep(0)
        await response.write_eof()
    except ConnectionError:  # the reader went away (``tqueue | head``): not an error
        pass
    return response
