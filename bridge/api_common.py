"""What the API's handlers share: the application's keys, error answers, query checks.

Contract: every refusal is ``{"error": message}`` (:func:`error_response`); a 429 also
names the ``limit`` and carries ``Retry-After`` (:func:`too_many`); :func:`refuse`
sends a refusal without reading a large unread body. :func:`query_params` answers an
unknown or repeated query parameter with a 400 (a :class:`ValidationError`).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from bridge.backend import Owner
from bridge.limits import LimitExceeded, UserLimits
from bridge.model import ValidationError
from bridge.service import JobService
from bridge.states import TERMINAL, JobState

__all__ = [
    "DRAIN_BYTES",
    "LIMITS_KEY",
    "OWNER_KEY",
    "SERVICE_KEY",
    "TOKENS_KEY",
    "body_too_large",
    "error_response",
    "query_params",
    "refuse",
    "too_many",
]

#: Items in a page of ``GET /v1/jobs`` when the caller names no ``limit``; also the
#: jobs per piece of its text table (bridge/api_table.py), so that both fold an array's
#: pending tasks over the same pages.
DEFAULT_PAGE = 500

OWNER_KEY = web.RequestKey("owner", Owner)
SERVICE_KEY = web.AppKey("service", JobService)
TOKENS_KEY = web.AppKey("tokens", dict)
LIMITS_KEY = web.AppKey("limits", UserLimits)


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None
           ) -> web.Response:
    extra = {k: v for k, v in (headers or {}).items() if k in ("Allow", "Retry-After")}
    return web.json_response({"error": message}, status=status, headers=extra)


#: A refused request's unread body up to this size is read and dropped (aiohttp's
#: lingering close), so that the client, still writing it, reads the answer; a larger
#: one (or one of unknown size) is not read: its connection is closed after the answer.
DRAIN_BYTES = 64 * 1024


async def refuse(request: web.Request, response: web.Response) -> web.Response:
    """Send a refusal; when the request's unread body is large (or of unknown size),
    send it now and close the connection instead of reading the rest."""
    length = request.content_length
    if (length is None or length > DRAIN_BYTES) and request.can_read_body:
        await response.prepare(request)
        await response.write_eof()
        request.protocol.force_close()  # the answer is flushed before the close
    return response


def too_many(exc: LimitExceeded) -> web.Response:
    return web.json_response({"error": str(exc), "limit": exc.limit}, status=429,
                             headers={"Retry-After": str(exc.retry_after)})


def body_too_large(limit: int, size: int | None = None) -> web.Response:
    got = f" ({size} bytes)" if size is not None else ""
    return error_response(413, f"request body too large{got}: at most {limit} bytes "
                       f"(limits.max_request_bytes)")


def query_params(request: web.Request, allowed: frozenset[str]) -> dict[str, str]:
    """The request's query parameters; an unknown or repeated one is a 400."""
    params: dict[str, str] = {}
    for key, value in request.query.items():
        if key not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ValidationError([("", f"unknown query parameter {key!r}; known: {known}")])
        if key in params:
            raise ValidationError([("", f"query parameter {key!r} given more than once")])
        params[key] = value
    return params


def listing_states(text: str | None) -> list[JobState] | None:
    """The states a listing's ``states`` parameter names: without it the unfinished
    ones (as squeue), ``all`` every state (None); :class:`ValidationError` naming an
    unknown state."""
    if text is None:
        return [s for s in JobState if s not in TERMINAL]
    if text.lower() == "all":
        return None
    try:
        return [JobState(s.strip().capitalize()) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValidationError([("", f"unknown state in {text!r}; known: "
                                    f"{', '.join(s.value for s in JobState)}")]) from None
