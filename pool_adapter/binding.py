"""The Kubernetes side of binding a JobSet to its Slurm allocation (I/O).

Everything here acts with the bridge's own identity, not the job's: a namespace
user who points the JobSet's identity annotation at an account without rights must
not keep pods on nodes whose allocation ended (an unpin or a delete that fails would
be retried for ever while the pods run).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import structlog

from bridge.backend import BackendJob, BackendRejected
from k8s_adapter.backend import KubernetesBackend
from k8s_adapter.jobset import GROUP, PLURAL, VERSION
from k8s_adapter.kube import JSON_PATCH, is_status
from pool_adapter import pinning
from pool_adapter.allocations import stop_seconds
from pool_adapter.nodemap import NodeMap

log = structlog.get_logger(__name__)


class Binder:
    """Labels a holder's nodes and pins, unpins or deletes its JobSet."""

    def __init__(self, k8s: KubernetesBackend, nodes: NodeMap):
        self.k8s = k8s
        self.nodes = nodes
        #: The pool's nodes of this Slurm cluster (None: not known yet, any node): the
        #: only ones whose allocation labels :meth:`unlabel` touches (another Slurm
        #: cluster's pool may label its nodes with the same job ids).
        self.scope: Callable[[], frozenset[str] | None] = lambda: None

    def node_names(self, holder: BackendJob) -> list[str]:
        """The Kubernetes nodes of ``holder``'s Slurm nodes (UnmappedNode if one has
        none)."""
        return self.nodes.to_kubernetes(holder.nodes, self.k8s.known_nodes())

    async def pin(self, obj: Mapping[str, Any], holder: BackendJob) -> list[str]:
        """Label the holder's nodes (the value: the JobSet's namespace,
        :mod:`pool_adapter.pinning`), then pin the JobSet ``obj`` to them and unsuspend
        it; the Kubernetes node names."""
        kube = self.k8s.kube
        names = self.node_names(holder)
        scope = self.scope()
        if scope is not None and not set(names) <= scope:
            log.warning("Slurm job %s has nodes outside the pool (%s): their allocation "
                        "label is never cleaned up by the pool", holder.backend_id,
                        ",".join(sorted(set(names) - scope)))
        label = pinning.allocation_label(holder.backend_id)
        await self.unlabel(holder.backend_id, keep=names)
        for node in names:
            await kube.call(f"label node {node} {label}", kube.core.patch_node, node,
                            {"metadata": {"labels": {label: obj["metadata"]["namespace"]}}})
        await self._patch(obj, pinning.pin_patch(obj, holder.backend_id, suspend=False))
        return names

    async def unpin(self, obj: Mapping[str, Any]) -> None:
        """Suspend the JobSet ``obj`` (its pods go) and drop its allocation label."""
        await self._patch(obj, pinning.pin_patch(obj, None, suspend=True))

    async def _patch(self, obj: Mapping[str, Any], ops: list[dict[str, Any]]) -> None:
        meta = obj["metadata"]
        kube = self.k8s.kube
        await kube.call(f"patch JobSet {meta['namespace']}/{meta['name']}",
                        kube.custom.patch_namespaced_custom_object, GROUP, VERSION,
                        meta["namespace"], PLURAL, meta["name"], ops,
                        _content_type=JSON_PATCH)

    async def unlabel(self, slurm_id: str, keep: Collection[str] = ()) -> None:
        """Remove the allocation label of ``slurm_id`` from every node of the pool
        (:attr:`scope`) but ``keep``, and delete the unfinished pods there that select
        it (:meth:`evict`)."""
        kube = self.k8s.kube
        label = pinning.allocation_label(slurm_id)
        listing = await kube.raw(f"list nodes labelled {label}", kube.core.list_node,
                                 label_selector=label)
        scope = self.scope()
        for node in listing.get("items") or []:
            name = (node.get("metadata") or {}).get("name")
            if name and name not in keep and (scope is None or name in scope):
                await kube.call(f"unlabel node {name} {label}", kube.core.patch_node, name,
                                {"metadata": {"labels": {label: None}}})
                await self.evict(label, name)

    async def evict(self, label: str, node: str) -> None:
        """Delete every pod bound to ``node`` that is not finished and selects the
        allocation label ``label``, in any namespace: the allocation has left the node,
        and nothing else would stop them (the pool's taint is ``NoSchedule``, which
        never evicts a running pod, and a node selector is not checked again once a
        pod runs). A team's own pods pinned to its job's allocation end with it as the
        job's pods do. Finished pods stay (their logs). A failure here is caught
        later by :mod:`pool_adapter.sweeper` (the label is gone by then)."""
        kube = self.k8s.kube
        listing = await kube.raw(f"list pods on node {node}",
                                 kube.core.list_pod_for_all_namespaces,
                                 field_selector=f"spec.nodeName={node},"
                                                "status.phase!=Succeeded,status.phase!=Failed")
        for pod in listing.get("items") or []:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            if label not in (spec.get("nodeSelector") or {}):
                continue
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            log.info("pod %s/%s on node %s selects ended allocation %s; deleting it",
                     namespace, name, node, label)
            await self.delete_pod(namespace, name, stop_seconds(spec))

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int,
                         uid: str | None = None) -> None:
        """Delete a pod, giving it at most ``grace_seconds`` to stop; with ``uid``, only
        that very pod (not one made again under its name). A missing one is no error."""
        kube = self.k8s.kube
        body: dict[str, Any] = {"gracePeriodSeconds": grace_seconds}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await kube.call(f"delete pod {namespace}/{name}", kube.core.delete_namespaced_pod,
                            name, namespace, body=body)
        except BackendRejected as exc:
            if not (is_status(exc, 404) or (uid and is_status(exc, 409))):
                raise

    async def delete(self, jobset_id: str) -> None:
        """Delete the JobSet (its Jobs and pods first); a missing one is no error."""
        namespace, _, name = jobset_id.partition("/")
        kube = self.k8s.kube
        try:
            await kube.call(f"delete JobSet {jobset_id}",
                            kube.custom.delete_namespaced_custom_object, GROUP, VERSION,
                            namespace, PLURAL, name, propagation_policy="Foreground")
        except BackendRejected as exc:
            if not is_status(exc, 404):
                raise

    async def exists(self, jobset_id: str, pool: str, uid: str) -> bool:
        """Whether ``jobset_id`` exists now (asked of the apiserver, not the watch) as
        this pool's JobSet of job ``uid``."""
        namespace, _, name = jobset_id.partition("/")
        kube = self.k8s.kube
        try:
            obj = await kube.call(f"get JobSet {jobset_id}",
                                  kube.custom.get_namespaced_custom_object, GROUP, VERSION,
                                  namespace, PLURAL, name)
        except BackendRejected as exc:
            if is_status(exc, 404):
                return False
            raise
        meta = obj.get("metadata") or {}
        return bool((meta.get("annotations") or {}).get(pinning.ANN_POOL) == pool
                    and (meta.get("labels") or {}).get("hpc-bridge.io/job-uid") == uid)
