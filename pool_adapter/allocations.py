"""Allocation labels whose Slurm job is no longer alive (pure bookkeeping).

A node keeps the label ``slurm.hpc-bridge.io/job-<id>`` only while Slurm job ``<id>``
holds it: the pool's admission policy lets in a pod that tolerates the pool's taint
when it selects such a label of its own namespace, so a label left behind (the daemon
was down when the holder ended, a cleanup failed) would be a door onto the pool with
no Slurm allocation behind it. :class:`StaleLabels` finds them from two sources the
pool already has: the Kubernetes nodes the watch keeps (their labels) and each
complete Slurm snapshot of the bridge's jobs (holders are bridge jobs, so a running
holder is in it, whichever daemon's pool it is). A label is stale once its job has
been missing from, or finished in, every snapshot for ``grace`` seconds: a holder that
has just started may be newer than the snapshot being read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bridge.backend import BackendJob
from pool_adapter.pinning import LABEL_PREFIX


def labelled_ids(nodes: Iterable[Mapping[str, Any]]) -> set[str]:
    """The Slurm ids of every allocation label on these nodes (trimmed Node objects)."""
    found: set[str] = set()
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        for key in labels:
            slurm_id = key.removeprefix(LABEL_PREFIX) if key.startswith(LABEL_PREFIX) else ""
            if slurm_id.isascii() and slurm_id.isdigit():
                found.add(slurm_id)
    return found


class StaleLabels:
    """Slurm ids labelled on nodes but not alive in Slurm (see the module docstring)."""

    def __init__(self, grace: float):
        self.grace = grace
        #: Slurm id -> when it was first seen labelled and not alive.
        self._dead_since: dict[str, float] = {}

    def update(self, nodes: Iterable[Mapping[str, Any]], jobs: Iterable[BackendJob],
               now: float) -> list[str]:
        """From the nodes and one complete Slurm snapshot at ``now``: the ids whose
        labels are stale now (each returned again at later calls while still labelled;
        the caller removes them once)."""
        alive = {j.backend_id for j in jobs if not j.state.finished}
        labelled = labelled_ids(nodes)
        dead = labelled - alive
        self._dead_since = {i: self._dead_since.get(i, now) for i in dead}
        return sorted(i for i, since in self._dead_since.items() if now - since >= self.grace)
