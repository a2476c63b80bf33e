"""Cleaning up after allocations that ended behind the pool's back (I/O).

:class:`AllocationSweeper` runs the bookkeeping of :mod:`pool_adapter.allocations` at
each complete Slurm snapshot, on the pool's nodes of this Slurm cluster only (what the
node-state pass last mapped, :attr:`pool_adapter.nodestate.NodeStates.pool_nodes`):

* an allocation label whose Slurm job has not held nodes for ``grace`` seconds is
  removed, after ``squeue -j`` confirms that one job does not hold nodes (finished,
  waiting, or unknown to Slurm; an empty answer proves nothing and keeps the label):
  one listing may be wrong, and a job missing from it is not proof enough to take
  nodes from a running job. Without squeue on the host no label is removed (the pool
  needs scancel and scontrol there anyway);
* a bound, unfinished pod that selects an allocation label its node no longer carries
  (for ``grace`` seconds) is deleted, with at most
  :data:`pool_adapter.allocations.MAX_STOP_SECONDS` to stop, once a fresh read of its
  node (not the watch's copy, which may lag) shows the label missing, and only the
  very pod judged (a uid precondition).

Both are the safety net under the holder's own cleanup (``Binder.unlabel`` and its
eviction when the pool sees a holder end): they catch what a crash, a failed call or a
label written late left. The pods are looked at only when the node or pod watch
changed (or something is still pending): a cost per change, not per pod per poll.
Each cleanup is one task per label or pod at a time, at most
:data:`CLEANUPS_AT_ONCE` at once, tried again after ``grace`` while its cause holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine
from functools import partial
from typing import Any

import structlog

from bridge.backend import BackendJob, BackendRejected
from k8s_adapter.backend import KubernetesBackend
from k8s_adapter.kube import is_status
from pool_adapter.allocations import StaleLabels, StrandedPod, StrandedPods, holds_nodes
from pool_adapter.binding import Binder
from pool_adapter.nodestate import NodeStates
from slurm_adapter.backend import SlurmBackend

log = structlog.get_logger(__name__)

Spawn = Callable[[str, Coroutine[Any, Any, None]], None]

#: Cleanups (a squeue, a node read, a patch or delete each) running at once.
CLEANUPS_AT_ONCE = 4


class AllocationSweeper:
    """See the module docstring. ``spawn`` runs a coroutine in the background (failures
    logged)."""

    def __init__(self, name: str, slurm: SlurmBackend, k8s: KubernetesBackend,
                 binder: Binder, node_states: NodeStates, spawn: Spawn, grace: float):
        self.name = name
        self.slurm = slurm
        self.k8s = k8s
        self.binder = binder
        self.node_states = node_states
        self.spawn = spawn
        self.labels = StaleLabels(grace)
        self.pods = StrandedPods(grace)
        self._busy: set[tuple[str, ...]] = set()
        self._slots = asyncio.Semaphore(CLEANUPS_AT_ONCE)
        self._pods_seen_at = -1

    def on_snapshot(self, jobs: Collection[BackendJob], now: float) -> None:
        """One complete Slurm snapshot of the bridge's jobs, at ``now`` (monotonic)."""
        pool = self.node_states.pool_nodes
        if not pool:
            return
        nodes = {n: obj for obj in self.k8s.known_nodes()
                 if (n := str((obj.get("metadata") or {}).get("name"))) in pool}
        for slurm_id in self.labels.update(nodes.values(), jobs, now):
            self.labels.retry_later(slurm_id, now)
            self._start(("label", slurm_id), partial(self._clear_label, slurm_id))
        version = self.k8s.capacity_version()
        if version == self._pods_seen_at and not self.pods.pending:
            return
        self._pods_seen_at = version
        for pod in self.pods.update(self.k8s.bound_pods(), nodes, now):
            self.pods.retry_later((pod.namespace, pod.name), now)
            self._start(("pod", pod.namespace, pod.name), partial(self._delete_pod, pod))

    def _start(self, key: tuple[str, ...],
               work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work()`` unless the cleanup of ``key`` still runs."""
        if key in self._busy:
            return
        self._busy.add(key)

        async def run() -> None:
            try:
                async with self._slots:
                    await work()
            finally:
                self._busy.discard(key)

        self.spawn(f"sweep-{'-'.join(key)}", run())

    async def _clear_label(self, slurm_id: str) -> None:
        if not self.slurm.cli.has("squeue"):
            log.warning("k8s-on-slurm %s: allocation label of Slurm job %s looks stale, but "
                        "without squeue on this host it is left", self.name, slurm_id)
            return
        state = await self.slurm.cli.job_state_if_known(slurm_id)
        if state == "" or (state is not None and holds_nodes(state)):
            return  # it holds its nodes after all (the listing was behind), or unproven
        log.warning("k8s-on-slurm %s: Slurm job %s is %s; removing its allocation label "
                    "from the pool's nodes", self.name, slurm_id, state or "unknown to Slurm")
        await self.binder.unlabel(slurm_id)

    async def _delete_pod(self, pod: StrandedPod) -> None:
        kube = self.k8s.kube
        try:
            node = await kube.raw(f"get node {pod.node}", kube.core.read_node, pod.node)
        except BackendRejected as exc:
            if not is_status(exc, 404):
                raise
            node = {}  # the node is gone, and its label with it
        if pod.label in ((node.get("metadata") or {}).get("labels") or {}):
            return  # the watch's copy of the node was behind
        log.warning("k8s-on-slurm %s: pod %s/%s on %s selects %s, which its node no longer "
                    "carries (the allocation ended); deleting it", self.name, pod.namespace,
                    pod.name, pod.node, pod.label)
        await self.binder.delete_pod(pod.namespace, pod.name, pod.grace_seconds, uid=pod.uid)
