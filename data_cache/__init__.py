"""The bridge's data cache: a job's dataset held in memory on its own nodes and streamed
to its ranks over Arrow Flight (docs/data-cache.md).

Training code needs only :func:`open_dataset`. Standalone: runs on compute nodes, needs
pyarrow and nothing of the daemon. The names below are imported when first used, so
that the daemon, which needs only :mod:`data_cache.credentials` and
:mod:`data_cache.layout`, does not load pyarrow (and numpy) by importing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from data_cache.reader import DataCacheError, Shard, open_dataset

__all__ = ["DataCacheError", "Shard", "open_dataset"]


def __getattr__(name: str) -> Any:
    """``open_dataset``, ``Shard`` and ``DataCacheError`` from :mod:`data_cache.reader`."""
    if name in __all__:
        from data_cache import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'data_cache' has no attribute {name!r}")
