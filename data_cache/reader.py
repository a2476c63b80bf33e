"""The reader training code uses: ``shard = open_dataset()``, then ``for batch in
shard.batches(epoch)``.

Contract:

* :func:`open_dataset` finds the job's cache from the environment the bridge sets —
  :data:`ADDRESSES_ENV` (the servers' ``grpc+tls://host:port`` locations, comma-separated,
  in server order) and the job's credentials (:mod:`data_cache.credentials`: token,
  certificate and key) — and this process's rank and
  world size from the variables mpi_launch and the launchers set (``RANK``/``WORLD_SIZE``,
  then Open MPI's, PMI's, Slurm's and Flux's). Arguments override the environment.
  It asks every server for its layout and refuses (:class:`DataCacheError`) a cache
  whose servers disagree or are missing.
* :meth:`Shard.batches` streams this rank's blocks for an epoch
  (:func:`data_cache.layout.rank_blocks`: disjoint, deterministic, the same after a
  restart) as the record batches Flight received — each column's buffers are the
  received message's, not a copy. :meth:`Shard.numpy` and :meth:`Shard.torch` hand the
  columns on without copying (``to_numpy(zero_copy_only=True)``, DLPack); a column that
  cannot be shared so (nulls, strings) raises ``pyarrow.ArrowInvalid``.
* A server that fails, or dies, mid-stream ends the iteration with
  :class:`DataCacheError` naming the server, its address and the blocks being read.
* The first :class:`Shard` of a process sets glibc's malloc to keep freed blocks for
  reuse (:func:`data_cache.malloc.keep_freed_blocks`: process-wide, skipped where the
  process's owner set malloc's variables or ``HPC_BRIDGE_DATA_CACHE_MALLOC=0``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from data_cache.credentials import TOKEN_ENV, Credentials, client, from_env
from data_cache.layout import block_count, rank_blocks, runs_by_server, server_blocks
from data_cache.malloc import keep_freed_blocks
from data_cache.server import auth_header

__all__ = ["ADDRESSES_ENV", "DataCacheError", "Shard", "open_dataset", "rank_and_world"]

#: The cache servers' locations, comma-separated, in server order.
ADDRESSES_ENV = "HPC_BRIDGE_DATA_CACHE"

_RANK_VARS = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
              ("PMI_RANK", "PMI_SIZE"), ("PMIX_RANK", "PMIX_SIZE"),
              ("SLURM_PROCID", "SLURM_NTASKS"), ("FLUX_TASK_RANK", "FLUX_JOB_SIZE"))


class DataCacheError(Exception):
    """The cache cannot be read; the message says which server and why."""


def rank_and_world(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """This process's rank and world size from the launchers' variables (else 0, 1)."""
    env = os.environ if env is None else env
    for rank_var, size_var in _RANK_VARS:
        if rank_var in env and size_var in env:
            try:
                rank, size = int(env[rank_var]), int(env[size_var])
            except ValueError:
                raise DataCacheError(f"{rank_var}/{size_var} are not integers") from None
            if not 0 <= rank < size:
                raise DataCacheError(f"{rank_var}={rank} is outside {size_var}={size}")
            return rank, size
    return 0, 1


class Shard:
    """One rank's view of the cache (see the module docstring)."""

    def __init__(self, addresses: list[str], creds: Credentials | str, rank: int,
                 world_size: int, seed: int | None = None, timeout: float = 30.0) -> None:
        keep_freed_blocks()
        if isinstance(creds, str):
            creds = Credentials(creds)
        token = creds.token
        if not addresses:
            raise DataCacheError("no cache server addresses")
        if not 0 <= rank < world_size:
            raise DataCacheError(f"rank {rank} is outside world size {world_size}")
        self.addresses = addresses
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self._options = flight.FlightCallOptions(headers=[auth_header(token)], timeout=timeout)
        self._stream_options = flight.FlightCallOptions(headers=[auth_header(token)])
        self._clients = [client(a, creds) for a in addresses]
        layouts = [self._layout(k) for k in range(len(addresses))]
        first = layouts[0]
        self.total_rows: int = first["total_rows"]
        self.block_rows: int = first["block_rows"]
        self._blocks = block_count(self.total_rows, self.block_rows)
        for k, layout in enumerate(layouts):
            want = server_blocks(k, len(addresses), self._blocks)
            if (layout["total_rows"], layout["block_rows"], layout["servers"], layout["index"],
                    layout["blocks"]) != (self.total_rows, self.block_rows, len(addresses), k,
                                          [want.start, want.stop]):
                raise DataCacheError(
                    f"cache server {k} ({addresses[k]}) serves another layout: {layout}")
        try:
            self.schema: pa.Schema = self._clients[0].get_schema(
                flight.FlightDescriptor.for_path("dataset"), self._options).schema
        except flight.FlightError as exc:
            raise DataCacheError(f"cache server 0 ({addresses[0]}): {exc}") from None

    def _layout(self, k: int) -> dict[str, Any]:
        try:
            results = list(self._clients[k].do_action(flight.Action("layout", b""), self._options))
            return dict(json.loads(results[0].body.to_pybytes()))
        except (flight.FlightError, pa.ArrowException, IndexError, ValueError) as exc:
            raise DataCacheError(f"cache server {k} ({self.addresses[k]}): {exc}") from None

    def blocks(self, epoch: int = 0) -> list[int]:
        """This rank's blocks in ``epoch``, in reading order."""
        return rank_blocks(self.rank, self.world_size, self._blocks, self.seed, epoch)

    def num_rows(self, epoch: int = 0) -> int:
        """How many rows this rank reads in ``epoch``."""
        last = self._blocks - 1
        tail = self.total_rows - last * self.block_rows
        return sum(tail if b == last else self.block_rows for b in self.blocks(epoch))

    def batches(self, epoch: int = 0) -> Iterator[pa.RecordBatch]:
        """This rank's record batches for ``epoch`` (one per block, in order)."""
        servers = len(self.addresses)
        for k, run in runs_by_server(self.blocks(epoch), servers, self._blocks):
            ticket = flight.Ticket(json.dumps({"blocks": run}).encode())
            where = f"cache server {k} ({self.addresses[k]}), blocks {run[0]}..{run[-1]}"
            try:
                reader = self._clients[k].do_get(ticket, self._stream_options)
                got = 0
                for chunk in reader:
                    got += 1
                    yield chunk.data
            except (flight.FlightError, pa.ArrowException) as exc:
                raise DataCacheError(f"{where}: {exc}") from None
            if got != len(run):
                raise DataCacheError(f"{where}: the stream ended after {got} of {len(run)} blocks")

    def numpy(self, epoch: int = 0) -> Iterator[dict[str, Any]]:
        """Each batch as ``{column: numpy array}`` sharing the received buffers."""
        for batch in self.batches(epoch):
            yield {name: batch.column(i).to_numpy(zero_copy_only=True)
                   for i, name in enumerate(batch.schema.names)}

    def torch(self, epoch: int = 0) -> Iterator[dict[str, Any]]:
        """Each batch as ``{column: torch tensor}`` through DLPack (torch is optional)."""
        import torch  # optional dependency

        for batch in self.batches(epoch):
            yield {name: torch.utils.dlpack.from_dlpack(batch.column(i))
                   for i, name in enumerate(batch.schema.names)}

    def close(self) -> None:
        for each in self._clients:
            each.close()

    def __enter__(self) -> Shard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_dataset(addresses: list[str] | None = None, *, rank: int | None = None,
                 world_size: int | None = None, seed: int | None = None,
                 token: str | None = None, credentials: Credentials | None = None,
                 timeout: float = 30.0) -> Shard:
    """This rank's shard of the job's cache (see the module docstring). ``token`` (plain
    gRPC) or ``credentials`` override the environment's."""
    if addresses is None:
        raw = os.environ.get(ADDRESSES_ENV, "")
        addresses = [a for a in raw.split(",") if a]
        if not addresses:
            raise DataCacheError(f"{ADDRESSES_ENV} is not set: this job has no data cache "
                                 "(its TrainJob names no spec.initializer.dataset)")
    creds = credentials or (Credentials(token) if token else from_env())
    if creds is None:
        raise DataCacheError(f"{TOKEN_ENV} is not set")
    env_rank, env_world = rank_and_world()
    return Shard(addresses, creds, env_rank if rank is None else rank,
                 env_world if world_size is None else world_size, seed=seed, timeout=timeout)
