"""What :class:`bridge.client.BridgeClient` asks of ``GET /v1/jobs``: the JSON listing
a page at a time (:meth:`ListingCalls.iter_pages`), and squeue's default table the
daemon renders (:meth:`ListingCalls.queue_table`). Mixed into the client; apart from it
for the length of one file. Standard library only at module level, as the client.
"""

from __future__ import annotations

import time

from bridge.client_errors import BridgeClientError
from bridge.http11 import ProtocolError

TYPE_CHECKING = False  # typing costs every command ~2 ms of start-up (bridge.client_types)
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from typing import Any

    from bridge.client_types import JobView
    from bridge.http11 import Connection, Response

__all__ = ["READ_CHUNK", "ListingCalls"]

#: Bytes read at once from a streamed answer.
READ_CHUNK = 64 * 1024


class ListingCalls:
    """The listing's calls; the client provides the requests they are made of."""

    _busy_retries: int
    _max_busy_wait: float

    if TYPE_CHECKING:
        def _call(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                  body: Any = None, headers: Mapping[str, str] | None = None) -> Any: ...
        def _request(self, method: str, path: str, *,
                     params: Mapping[str, str] | None = None, body: Any = None,
                     read_timeout: bool = True, headers: Mapping[str, str] | None = None,
                     ) -> tuple[Connection, Response]: ...
        def _read(self, response: Response) -> bytes: ...
        @staticmethod
        def _http_error(response: Response, data: bytes) -> BridgeClientError: ...
        def transport_error(self, exc: OSError | ProtocolError) -> BridgeClientError: ...
        @staticmethod
        def _object(data: Any, what: str) -> dict[str, Any]: ...

    def iter_pages(
        self,
        *,
        states: Sequence[str] | None = None,
        all_states: bool = False,
        user: str | None = None,
        backend: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[list[JobView]]:
        """Jobs by state (default: those not finished; ``all_states``: every job), oldest
        first, one page (one request) at a time; ``page_size`` items at most per page
        (the daemon's default when None). The next page is asked for, in a thread, while
        the caller works on this one (``tqueue`` formats a page as the daemon builds the
        next: at 10,000 jobs the two took about as long as each other). So one request
        may be in flight when the caller stops iterating: it runs to its end (its answer
        or error dropped) in its daemon thread; it never outlives the client's timeout
        and busy retries."""
        params: dict[str, str] = {}
        if all_states:
            params["states"] = "all"
        elif states:
            params["states"] = ",".join(states)
        if user:
            params["user"] = user
        if backend:
            params["backend"] = backend
        if page_size:
            params["limit"] = str(page_size)
        seen: set[str] = set()
        page, token = self._page(params)
        while True:
            if not token:
                yield page
                return
            if not isinstance(token, str) or token in seen:
                yield page
                raise BridgeClientError("hpc-bridge sent an unexpected job list (continue)")
            seen.add(token)
            from bridge.client_ahead import Ahead  # only for a second page

            ahead = Ahead(self._page, {**params, "continue": token})
            yield page
            page, token = ahead.result()

    def queue_table(self, *, user: str | None = None, array: bool = False,
                    refused: tuple[Response, bytes] | None = None) -> Iterator[str] | None:
        """squeue's default table of the unfinished jobs (of ``user``), rendered by the
        daemon (``GET /v1/jobs``, ``Accept: text/plain``; no header line), as text in
        pieces as they arrive; ``array``: one line per task of a job array. ``None``
        when the daemon predates the table (it answers JSON, or refuses ``array``): the
        caller lists with :meth:`iter_pages`. A refusal raises :class:`BridgeClientError` (a
        429 asked again as :meth:`_call` does); an answer cut short, too. ``refused``: the
        daemon's refusal (status 400 or more, body read) of this request asked once
        already (:mod:`bridge.cli.quick`), read as if it had come here."""
        params = {"user": user} if user else {}
        if array:
            params["array"] = "1"
        retries = self._busy_retries
        while True:
            if refused is not None and refused[0].status >= 400:
                response, data = refused
                refused = None
            else:
                connection, response = self._request("GET", "/v1/jobs", params=params,
                                                     headers={"Accept": "text/plain"})
                if response.status < 400:
                    break
                try:
                    data = self._read(response)
                finally:
                    connection.close()
            error = self._http_error(response, data)
            if error.status == 400 and str(error).startswith("unknown query parameter 'array'"):
                return None  # a daemon that predates the table refuses array=1
            wait = error.retry_after
            if error.status != 429 or wait is None or wait > self._max_busy_wait or retries <= 0:
                raise error
            retries -= 1
            time.sleep(wait)
        if not (response.getheader("Content-Type") or "").startswith("text/plain"):
            connection.close()
            return None
        return self._text(connection, response)

    def _text(self, connection: Connection, response: Response) -> Iterator[str]:
        """The body of a UTF-8 text answer, decoded as it arrives; closes the connection."""
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while chunk := response.read1(READ_CHUNK):
                yield decoder.decode(chunk)
            yield decoder.decode(b"", final=True)
        except (OSError, ProtocolError) as exc:
            raise self.transport_error(exc) from None
        finally:
            connection.close()

    def _page(self, params: dict[str, str]) -> tuple[list[JobView], object]:
        """One page of ``GET /v1/jobs`` and its ``metadata.continue`` (unchecked)."""
        data = self._object(self._call("GET", "/v1/jobs", params=params), "job list")
        items = data.get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise BridgeClientError("hpc-bridge sent an unexpected job list")
        page: Any = items  # checked above: a list of objects
        metadata = data.get("metadata")
        return page, metadata.get("continue") if isinstance(metadata, dict) else None

    def list_jobs(
        self,
        *,
        states: Sequence[str] | None = None,
        all_states: bool = False,
        user: str | None = None,
        backend: str | None = None,
    ) -> list[JobView]:
        """Every job :meth:`iter_pages` gives, in one list."""
        return [job for page in self.iter_pages(states=states, all_states=all_states,
                                                 user=user, backend=backend) for job in page]

