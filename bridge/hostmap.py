"""A read-only mapping whose copy with a few values replaced costs those values only.

:meth:`bridge.topology.Topology.with_hosts` makes one topology per placed job of a
pass (the job's hosts taken); with 10,000 hosts a whole ``dict`` copy per job was the
largest cost left in a pass (``bench/placement.py``, part (a)). A :class:`ChunkedMap`
keeps its items in chunks of :data:`CHUNK` consecutive keys, and :meth:`replaced`
shares every chunk it does not change. The standard library has no persistent
mapping, and the pyrsistent package would add a dependency for this one use; the
structure is two levels deep, so it is written here.

Contracts: it is a ``Mapping`` (equality, iteration in the order the items were first
given, ``len``, ``in``); nothing changes it after it is made; :meth:`replaced` leaves
the original as it was. Replacing a key it lacks adds the key at the end (then the
copy is made whole).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["CHUNK", "ChunkedMap"]

V = TypeVar("V")

#: Keys per chunk: a replacement copies one chunk of this size, plus one list entry
#: per chunk.
CHUNK = 64


class ChunkedMap(Mapping[str, V], Generic[V]):
    """A read-only ``str -> V`` mapping (see the module docstring)."""

    __slots__ = ("_chunks", "_index", "_len")

    def __init__(self, items: Mapping[str, V] | Iterable[tuple[str, V]] = ()) -> None:
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        merged = dict(pairs)
        keys = list(merged)
        self._index: dict[str, int] = {k: i // CHUNK for i, k in enumerate(keys)}
        self._chunks: list[dict[str, V]] = [
            {k: merged[k] for k in keys[i:i + CHUNK]} for i in range(0, len(keys), CHUNK)]
        self._len = len(keys)

    def __getitem__(self, key: str) -> V:
        return self._chunks[self._index[key]][key]

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks:
            yield from chunk

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"ChunkedMap({dict(self.items())!r})"

    def replaced(self, items: Iterable[tuple[str, V]]) -> ChunkedMap[V]:
        """A copy with these keys' values replaced (added, for a key it lacks)."""
        changes = dict(items)
        index = self._index
        if any(k not in index for k in changes):
            return ChunkedMap({**dict(self.items()), **changes})
        chunks = list(self._chunks)
        copied: set[int] = set()
        for key, value in changes.items():
            i = index[key]
            if i not in copied:
                chunks[i] = dict(chunks[i])
                copied.add(i)
            chunks[i][key] = value
        out: ChunkedMap[V] = ChunkedMap.__new__(ChunkedMap)
        out._index, out._chunks, out._len = index, chunks, self._len
        return out
