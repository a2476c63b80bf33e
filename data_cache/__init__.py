"""The bridge's data cache: a job's dataset held in memory on its own nodes and streamed
to its ranks over Arrow Flight (docs/data-cache.md).

Training code needs only :func:`open_dataset`. Standalone: runs on compute nodes, needs
pyarrow and nothing of the daemon.
"""

from data_cache.reader import DataCacheError, Shard, open_dataset

__all__ = ["DataCacheError", "Shard", "open_dataset"]
