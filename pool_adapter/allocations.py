"""Allocation labels and pinned pods that outlived their Slurm job (pure bookkeeping).

A node keeps the label ``slurm.hpc-bridge.io/job-<id>`` only while Slurm job ``<id>``
holds it, and a pod that selects such a label runs only while its node carries it:
the pool's admission policy lets in a pod that tolerates the pool's taint when it
selects an allocation label of its own namespace, so a label left behind (the daemon
was down when the holder ended, a cleanup failed) would be a door onto the pool with
no Slurm allocation behind it, and a pod left running after its label went (a
``NoSchedule`` taint never evicts) would run on nodes Slurm has given to others.

Both are found from what the pool already watches, and only on the pool's nodes of
its own Slurm cluster (another cluster's pool may share the Kubernetes cluster):

* :class:`StaleLabels`: the node labels against each complete Slurm snapshot of the
  bridge's jobs (holders are bridge jobs, so a running holder is in it, whichever
  daemon's pool on this Slurm cluster it is). A label is a candidate once its job has
  not held nodes (:func:`holds_nodes`: running, or suspended by Slurm in place) in any
  snapshot for ``grace`` seconds: missing, finished, or waiting (requeued, held by the
  bridge's suspend: the nodes are Slurm's again). A holder that has just started may be
  newer than the snapshot being read, so the caller asks Slurm about that one job
  before it removes the label (a listing may be wrong).
* :class:`StrandedPods`: the bound, unfinished pods on those nodes that select an
  allocation label their node does not carry, for ``grace`` seconds (the node and pod
  watches are two streams: a pin's label may show after its pods; the caller reads the
  node again before it deletes). A pod already being deleted is left to finish.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.backend import BackendJob, BackendState
from pool_adapter.pinning import LABEL_PREFIX
from slurm_adapter.records import backend_state

#: Slurm's states of a job suspended in place (``scontrol suspend``, SIGSTOP): it keeps
#: its nodes. (The bridge's own suspend requeues and holds: the job waits.)
_SUSPENDED_IN_PLACE = frozenset({"SUSPENDED", "STOPPED"})


def holds_nodes(slurm_state: str) -> bool:
    """Whether a job in Slurm's state ``slurm_state`` (names joined by ``+``, as
    ``BackendJob.native_state`` and squeue's ``%T`` give them) holds its nodes."""
    names = [n for n in slurm_state.upper().split("+") if n]
    return (backend_state(names) is BackendState.RUNNING
            or any(n in _SUSPENDED_IN_PLACE for n in names))


def allocation_ids(labels: Mapping[str, Any]) -> set[str]:
    """The Slurm ids of the allocation labels among ``labels`` (node labels, or the keys
    of a node selector)."""
    found: set[str] = set()
    for key in labels:
        slurm_id = key.removeprefix(LABEL_PREFIX) if key.startswith(LABEL_PREFIX) else ""
        if slurm_id.isascii() and slurm_id.isdigit():
            found.add(slurm_id)
    return found


def labelled_ids(nodes: Iterable[Mapping[str, Any]]) -> set[str]:
    """The Slurm ids of every allocation label on these nodes (trimmed Node objects)."""
    found: set[str] = set()
    for node in nodes:
        found |= allocation_ids((node.get("metadata") or {}).get("labels") or {})
    return found


class _Grace:
    """Keys seen in a state for ``grace`` seconds (forgotten when not seen)."""

    def __init__(self, grace: float):
        self.grace = grace
        self._since: dict[Any, float] = {}

    def due(self, seen: Collection[Any], now: float) -> list[Any]:
        self._since = {k: self._since.get(k, now) for k in seen}
        return [k for k, since in self._since.items() if now - since >= self.grace]

    def retry_later(self, key: Any, now: float) -> None:
        """``key`` is due again only after another ``grace`` (its cleanup is under way
        or found it alive)."""
        if key in self._since:
            self._since[key] = now

    @property
    def pending(self) -> bool:
        return bool(self._since)


class StaleLabels(_Grace):
    """Slurm ids labelled on nodes but not alive in Slurm (module docstring)."""

    def update(self, nodes: Iterable[Mapping[str, Any]], jobs: Iterable[BackendJob],
               now: float) -> list[str]:
        """From the pool's nodes and one complete Slurm snapshot at ``now``: the ids
        whose labels are candidates now, sorted (again at later calls while still
        labelled, unless :meth:`retry_later`)."""
        alive = {j.backend_id for j in jobs if holds_nodes(j.native_state)}
        return sorted(self.due(labelled_ids(nodes) - alive, now))


@dataclass(frozen=True)
class StrandedPod:
    namespace: str
    name: str
    #: The pod's uid: a pod made again under its name is not the one judged here.
    uid: str
    node: str
    #: The allocation label it selects that its node lacks.
    label: str
    #: Seconds its deletion may take at most (the pod's own grace, capped).
    grace_seconds: int


#: The most a stranded pod gets to stop: a pod that ignores SIGTERM must not keep a
#: node Slurm gave to someone else for its own (admission-free) grace period.
MAX_STOP_SECONDS = 30


def stop_seconds(pod_spec: Mapping[str, Any]) -> int:
    """The seconds a pod gets to stop when its allocation ended: its own
    ``terminationGracePeriodSeconds``, at most :data:`MAX_STOP_SECONDS`."""
    grace = pod_spec.get("terminationGracePeriodSeconds")
    return (min(grace, MAX_STOP_SECONDS) if isinstance(grace, int) and grace >= 0
            else MAX_STOP_SECONDS)


class StrandedPods(_Grace):
    """Pods pinned to an allocation their node no longer carries (module docstring)."""

    def update(self, pods: Iterable[Mapping[str, Any]],
               nodes: Mapping[str, Mapping[str, Any]], now: float) -> list[StrandedPod]:
        """From the bound pods and the pool's nodes (by name) at ``now``: the pods to
        delete now (again at later calls while still there, unless
        :meth:`retry_later`)."""
        found: dict[tuple[str, str], StrandedPod] = {}
        for pod in pods:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            node = nodes.get(str(spec.get("nodeName")))
            if node is None or meta.get("deletionTimestamp"):
                continue
            wanted = allocation_ids(spec.get("nodeSelector") or {})
            missing = wanted - allocation_ids((node.get("metadata") or {}).get("labels") or {})
            if not missing:
                continue
            key = (str(meta.get("namespace")), str(meta.get("name")))
            found[key] = StrandedPod(
                key[0], key[1], str(meta.get("uid") or ""), str(spec.get("nodeName")),
                LABEL_PREFIX + min(missing), stop_seconds(spec))
        return [found[k] for k in sorted(self.due(found, now))]
