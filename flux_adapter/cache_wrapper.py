"""The argv prefix that runs a Flux job's tasks through ``data-cache run`` (the job's
data cache: data_cache/run.py, docs/data-cache.md)."""

from __future__ import annotations

from bridge.backend import BackendRejected
from bridge.dataset import DataCacheSpec, serve_options

__all__ = ["cache_wrapper"]


def cache_wrapper(spec: DataCacheSpec, tasks_per_node: int,
                  data_cache: str = "data-cache") -> tuple[str, ...]:
    """The argv prefix that makes every task start the job's data cache first (the first
    task of each node serves that node's partition; all wait for every server, then run
    their command: data_cache/run.py). Refuses a path holding a ``{{`` template."""
    if "{{" in spec.source:
        raise BackendRejected("spec.initializer.dataset.storageUri: holds '{{', which Flux's "
                              "job shell would expand as a template")
    if any("{{" in (v or "") for v in (spec.metadata_location, spec.catalog_uri,
                                        spec.catalog_name)):
        raise BackendRejected("spec.initializer.dataset.env: a value holds '{{', which "
                              "Flux's job shell would expand as a template")
    argv = [data_cache, "run", *serve_options(spec)]
    return (*argv, "--tasks-per-node", str(tasks_per_node), "--")
