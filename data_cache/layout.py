"""How a cached dataset is cut: blocks, cache servers' partitions, ranks' shares.

Pure functions; every process of a job (each cache server, each rank) computes the
same answers from the same few numbers, so nothing but those numbers travels.

Contract:

* The dataset's rows, in source order (files sorted by path, rows in file order),
  are numbered ``0 .. total_rows-1`` and cut into blocks of ``block_rows`` rows (the
  last block may be shorter): :func:`block_count`, :func:`block_rows_of`.
* Server ``k`` of ``K`` holds the contiguous blocks :func:`server_blocks` ``(k, K)``:
  ``[k*nb//K, (k+1)*nb//K)``. Servers' ranges are disjoint and cover every block;
  :func:`server_of` is its inverse.
* An epoch's block order (:func:`epoch_order`) is the identity without a seed, else
  a Fisher-Yates permutation driven only by ``random.Random(f"{seed}:{epoch}").random()``
  (the one generator method whose sequence Python guarantees across versions).
* Rank ``r`` of ``W`` reads :func:`rank_blocks`: the ``r``-th contiguous slice
  ``[r*nb//W, (r+1)*nb//W)`` of that order. Ranks' shares are disjoint, cover the
  dataset exactly once per epoch, differ in size by at most one block, and depend on
  nothing but ``(total_rows, block_rows, W, r, seed, epoch)``: a restarted rank reads
  the same share. With more ranks than blocks some ranks read nothing.
* Trainer's shard protocol (a Flight descriptor path ``[index, total]``):
  :func:`shard_rows` gives shard ``index`` of ``total`` the rows
  ``[index*s, min((index+1)*s, total_rows))`` with ``s = ceil(total_rows/total)``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

__all__ = [
    "block_count",
    "block_rows_of",
    "epoch_order",
    "rank_blocks",
    "runs_by_server",
    "server_blocks",
    "server_of",
    "shard_rows",
]


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, not {value}")


def block_count(total_rows: int, block_rows: int) -> int:
    """How many blocks ``total_rows`` rows make (0 for an empty dataset)."""
    _positive("block_rows", block_rows)
    if total_rows < 0:
        raise ValueError(f"total_rows must be >= 0, not {total_rows}")
    return -(-total_rows // block_rows)


def block_rows_of(block: int, total_rows: int, block_rows: int) -> range:
    """The global row numbers of ``block``."""
    start = block * block_rows
    if not 0 <= start < total_rows:
        raise ValueError(f"block {block} is outside a dataset of {total_rows} rows")
    return range(start, min(start + block_rows, total_rows))


def _slice(index: int, parts: int, length: int) -> range:
    _positive("the number of parts", parts)
    if not 0 <= index < parts:
        raise ValueError(f"index {index} is outside 0..{parts - 1}")
    return range(index * length // parts, (index + 1) * length // parts)


def server_blocks(server: int, servers: int, blocks: int) -> range:
    """The blocks cache server ``server`` of ``servers`` holds."""
    return _slice(server, servers, blocks)


def server_of(block: int, servers: int, blocks: int) -> int:
    """The server holding ``block`` (inverse of :func:`server_blocks`)."""
    if not 0 <= block < blocks:
        raise ValueError(f"block {block} is outside 0..{blocks - 1}")
    # server_blocks(k) starts at floor(k*nb/K); the holder is the largest such k <= block.
    k = ((block + 1) * servers - 1) // blocks
    while k > 0 and k * blocks // servers > block:
        k -= 1
    while (k + 1) * blocks // servers <= block:
        k += 1
    return k


def epoch_order(blocks: int, seed: int | None, epoch: int) -> list[int]:
    """The order in which an epoch visits the blocks (see the module docstring)."""
    order = list(range(blocks))
    if seed is None:
        return order
    rng = random.Random(f"{seed}:{epoch}")  # noqa: S311 - a shuffle, not a secret
    for i in range(blocks - 1, 0, -1):
        j = min(int(rng.random() * (i + 1)), i)
        order[i], order[j] = order[j], order[i]
    return order


def rank_blocks(rank: int, world: int, blocks: int, seed: int | None, epoch: int) -> list[int]:
    """The blocks rank ``rank`` of ``world`` reads in ``epoch``, in reading order."""
    share = _slice(rank, world, blocks)
    return epoch_order(blocks, seed, epoch)[share.start:share.stop]


def runs_by_server(order: list[int], servers: int, blocks: int) -> Iterator[tuple[int, list[int]]]:
    """``order`` cut into maximal runs of consecutive blocks on one server:
    ``(server, [block, ...])`` — one stream per run keeps the order and the round trips few."""
    run: list[int] = []
    holder = -1
    for block in order:
        k = server_of(block, servers, blocks)
        if run and k != holder:
            yield holder, run
            run = []
        holder = k
        run.append(block)
    if run:
        yield holder, run


def shard_rows(index: int, total: int, total_rows: int) -> range:
    """Trainer's shard ``index`` of ``total`` (descriptor path ``[index, total]``)."""
    _positive("total", total)
    if not 0 <= index < total:
        raise ValueError(f"shard index {index} is outside 0..{total - 1}")
    size = -(-total_rows // total)
    start = min(index * size, total_rows)
    return range(start, min(start + size, total_rows))
