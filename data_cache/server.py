"""A cache server: one per cache node, holding its partition of a dataset in memory and
serving it over Arrow Flight.

Contract:

* With ``tls`` (the job's certificate and key: data_cache/credentials.py) the server
  speaks mutual TLS and ends, at the handshake, any connection that does not present the
  job's certificate: before gRPC reads a request. Every call must also carry
  ``authorization: Bearer <token>`` with the job's token (:data:`TOKEN_ENV`); any
  other call fails ``UNAUTHENTICATED`` before the server acts on it, so another user of
  the cluster who finds the port learns nothing of the data. (Without TLS, gRPC still
  reads a request before the token is checked.)
* ``do_action("layout")`` returns JSON ``{"total_rows", "block_rows", "servers",
  "index", "blocks": [start, stop], "rows"}``; ``do_action("peers", JSON list of
  addresses)`` tells the server where every server of the job listens (the ``wait`` step
  does, once all are loaded), which Trainer's shard protocol needs.
* ``do_get`` with ticket JSON ``{"blocks": [b, ...]}`` streams exactly those blocks, in
  that order, one record batch each (the batches the server holds: nothing is copied);
  a block this server does not hold fails ``INVALID_ARGUMENT`` naming it. Ticket
  ``{"rows": [start, stop]}`` streams this server's rows of that global range (slices,
  not copies).
* ``get_schema`` answers the dataset's schema for any descriptor. ``get_flight_info``
  with path ``[index, total]`` is Kubeflow Trainer's data-cache shard request: one
  endpoint per server holding rows of :func:`data_cache.layout.shard_rows`, each with a
  ``rows`` ticket and that server's location.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from data_cache.credentials import TOKEN_ENV
from data_cache.layout import block_count, server_blocks, shard_rows

__all__ = ["TOKEN_ENV", "CacheServer", "auth_header"]

#: The most bytes a ticket or action body may have (a ticket lists block numbers).
MAX_REQUEST_BYTES = 4 << 20


def auth_header(token: str) -> tuple[bytes, bytes]:
    """The header a client sends with every call."""
    return b"authorization", b"Bearer " + token.encode()


class _Auth(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self._expected = b"Bearer " + token.encode()

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> None:
        given = headers.get("authorization", [])
        value = given[0] if len(given) == 1 else b""
        if isinstance(value, str):
            value = value.encode()
        if not hmac.compare_digest(value, self._expected):
            raise flight.FlightUnauthenticatedError("a valid cache token is required")
        return None


def _json(body: bytes, what: str) -> Any:
    if len(body) > MAX_REQUEST_BYTES:
        raise flight.FlightServerError(f"{what} is larger than {MAX_REQUEST_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise flight.FlightServerError(f"{what} is not JSON") from None


class CacheServer(flight.FlightServerBase):  # type: ignore[misc]
    """Serves ``batches`` — blocks ``server_blocks(index, servers, nb)`` of a dataset of
    ``total_rows`` rows cut into ``block_rows``-row blocks."""

    def __init__(self, location: str, *, token: str, schema: pa.Schema,
                 batches: list[pa.RecordBatch], total_rows: int, block_rows: int,
                 index: int, servers: int, peers: list[str] | None = None,
                 tls: tuple[bytes, bytes] | None = None) -> None:
        if tls is None:
            super().__init__(location, middleware={"auth": _Auth(token)})
        else:
            cert, key = tls
            super().__init__(location, middleware={"auth": _Auth(token)},
                             tls_certificates=[flight.CertKeyPair(cert, key)],
                             verify_client=True, root_certificates=cert)
        nb = block_count(total_rows, block_rows)
        self._range = server_blocks(index, servers, nb)
        if len(batches) != len(self._range):
            raise ValueError(f"{len(batches)} batches for blocks {self._range}")
        self._schema = schema
        self._blocks = dict(zip(self._range, batches, strict=True))
        self._total_rows = total_rows
        self._block_rows = block_rows
        self._index = index
        self._servers = servers
        if peers is not None and len(peers) != servers:
            raise ValueError(f"{len(peers)} peers for {servers} servers")
        self._peers: list[str] | None = peers

    # -- layout ----------------------------------------------------------------------

    def layout(self) -> dict[str, Any]:
        rows = sum(b.num_rows for b in self._blocks.values())
        return {"total_rows": self._total_rows, "block_rows": self._block_rows,
                "servers": self._servers, "index": self._index,
                "blocks": [self._range.start, self._range.stop], "rows": rows}

    def _row_range(self) -> range:
        start = self._range.start * self._block_rows
        return range(min(start, self._total_rows),
                     min(self._range.stop * self._block_rows, self._total_rows))

    # -- Flight ----------------------------------------------------------------------

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return [("layout", "this server's part of the dataset (JSON)"),
                ("peers", "set every server's address (JSON list), in server order")]

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        if action.type == "layout":
            return iter([json.dumps(self.layout()).encode()])
        if action.type == "peers":
            peers = _json(action.body.to_pybytes(), "the peers list")
            if (not isinstance(peers, list) or len(peers) != self._servers
                    or not all(isinstance(p, str) for p in peers)):
                raise flight.FlightServerError(
                    f"peers must be a JSON list of {self._servers} addresses")
            self._peers = peers
            return iter([])
        raise flight.FlightServerError(f"unknown action {action.type!r}")

    def get_schema(self, context: Any, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        return flight.SchemaResult(self._schema)

    def get_flight_info(self, context: Any,
                        descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        path = descriptor.path or []
        try:
            index, total = (int(p) for p in path)
            wanted = shard_rows(index, total, self._total_rows)
        except ValueError:
            raise flight.FlightServerError(
                "the descriptor path must be [shard index, shard count]") from None
        if self._peers is None:
            raise flight.FlightUnavailableError("the cache is still starting (peers unknown)")
        endpoints = []
        nb = block_count(self._total_rows, self._block_rows)
        for k, location in enumerate(self._peers):
            blocks = server_blocks(k, self._servers, nb)
            lo = max(wanted.start, blocks.start * self._block_rows)
            hi = min(wanted.stop, blocks.stop * self._block_rows)
            if hi > lo:
                ticket = json.dumps({"rows": [lo, hi]}).encode()
                endpoints.append(flight.FlightEndpoint(ticket, [location]))
        return flight.FlightInfo(self._schema, descriptor, endpoints, len(wanted), -1, ordered=True)

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
        request = _json(ticket.ticket, "the ticket")
        if isinstance(request, dict) and isinstance(request.get("blocks"), list):
            out = []
            for block in request["blocks"]:
                batch = self._blocks.get(block) if isinstance(block, int) else None
                if batch is None:
                    raise flight.FlightServerError(
                        f"block {block!r} is not on cache server {self._index} "
                        f"(it holds blocks {self._range.start}..{self._range.stop - 1})")
                out.append(batch)
            return flight.RecordBatchStream(pa.Table.from_batches(out, schema=self._schema))
        if (isinstance(request, dict) and isinstance(request.get("rows"), list)
                and len(request["rows"]) == 2
                and all(isinstance(r, int) for r in request["rows"])):
            mine = self._row_range()
            lo, hi = max(request["rows"][0], mine.start), min(request["rows"][1], mine.stop)
            out = []
            for block, batch in self._blocks.items():
                start = block * self._block_rows
                a, b = max(lo, start), min(hi, start + batch.num_rows)
                if b > a:
                    out.append(batch.slice(a - start, b - a))
            return flight.RecordBatchStream(pa.Table.from_batches(out, schema=self._schema))
        raise flight.FlightServerError(
            'the ticket must be {"blocks": [...]} or {"rows": [start, stop]}')
