"""The argv prefix that runs a Flux job's tasks through ``data-cache run`` (the job's
data cache: data_cache/run.py, docs/data-cache.md)."""

from __future__ import annotations

from bridge.backend import BackendRejected
from bridge.dataset import DataCacheSpec

__all__ = ["cache_wrapper"]


def cache_wrapper(spec: DataCacheSpec, tasks_per_node: int,
                  data_cache: str = "data-cache") -> tuple[str, ...]:
    """The argv prefix that makes every task start the job's data cache first (the first
    task of each node serves that node's partition; all wait for every server, then run
    their command: data_cache/run.py). Refuses a path holding a ``{{`` template."""
    if "{{" in spec.source:
        raise BackendRejected("spec.initializer.dataset.storageUri: holds '{{', which Flux's "
                              "job shell would expand as a template")
    argv = [data_cache, "run", "--source", spec.source]
    if spec.fmt:
        argv += ["--format", spec.fmt]
    if spec.block_rows:
        argv += ["--block-rows", str(spec.block_rows)]
    if spec.memory_bytes:
        argv += ["--memory-limit", str(spec.memory_bytes)]
    return (*argv, "--tasks-per-node", str(tasks_per_node), "--")
