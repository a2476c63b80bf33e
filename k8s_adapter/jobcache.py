"""What the Kubernetes back end's watches last showed of its JobSets and their pods.

Both are keyed by **(namespace, job uid)**, never by the uid alone: the uid label
(``hpc-bridge.io/uid``) is only a key that anybody who may create a JobSet or a pod
in *some* namespace can write, so a foreign JobSet in another namespace carrying a
victim's uid must not replace the victim's JobSet here (its ``jobsStatus`` would be
written into the victim's TrainJob), nor may its pods add nodes, a failure detail or
the pod ``tlog`` reads to the victim's job, nor may its deletion drop what is known
of the victim's pods. Which of the JobSets carrying a uid is the stored job's is
decided by the engine (:mod:`bridge.ownership`); this cache only keeps them apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from bridge.backend import BackendJob, BackendState
from k8s_adapter.data_cache import CACHE
from k8s_adapter.jobset import (
    UID_LABEL,
)
from k8s_adapter.jobset_status import (
    backend_job_from_jobset,
    container_failure,
    replicated_jobs_status,
)

#: (namespace, job uid)
Key = tuple[str, str]

#: Which pod watch an event comes from: the job's pods bound to a node and not
#: finished (``capacity.BOUND_PODS``), or those that failed (:data:`FAILED_PODS`).
PodSource = Literal["bound", "failed"]
BOUND: PodSource = "bound"
FAILED: PodSource = "failed"
#: The failed pod watch's field selector.
FAILED_PODS = "status.phase=Failed"


@dataclass
class PodsSeen:
    """What the pod watches know of one job's pods in one namespace (by pod name).

    The watches select pods (bound and unfinished; failed), so a pod that leaves a
    selection comes as DELETED, carrying what it was before (the apiserver's way): a
    pod that ended keeps its node (it ran there), one deleted (``deletionTimestamp``,
    a suspend or a restart of the JobSet) gives it up; a container's failure and
    restart in place (``restartPolicy: OnFailure``) is forgotten when its pod ends
    unless the pod failed, which the failed pod watch tells whichever watch speaks
    first (``failed_phase``)."""

    namespace: str
    nodes: dict[str, str] = field(default_factory=dict)
    failed: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    #: The pods of ``failed`` whose failure a Failed pod told (not a restart in place).
    failed_phase: set[str] = field(default_factory=set)
    #: The pod whose log ``tlog`` reads (completion index 0; the launcher's for MPI;
    #: never a data cache's).
    first: str | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def key_of(obj: Mapping[str, Any]) -> Key | None:
    """(namespace, uid label) of a JobSet or pod; None when it has no uid label."""
    meta = _meta(obj)
    uid = str((meta.get("labels") or {}).get(UID_LABEL) or "")
    return (str(meta.get("namespace") or ""), uid) if uid else None


class JobCache:
    """The JobSets and pods of the back end's watches (see the module docstring)."""

    def __init__(self) -> None:
        self.jobsets: dict[Key, dict[str, Any]] = {}
        #: (namespace, name) -> the key of ``jobsets`` (a JobSet found by name in O(1)).
        self._by_name: dict[tuple[str, str], Key] = {}
        self.pods: dict[Key, PodsSeen] = {}
        #: The view of each JobSet last handed to the engine (:meth:`news`).
        self._shown: dict[Key, BackendJob] = {}

    # -- JobSets ---------------------------------------------------------------------

    def backend_job(self, obj: Mapping[str, Any], deleted: bool = False) -> BackendJob | None:
        """The engine's view of JobSet ``obj``, with the nodes and failures of its
        own namespace's pods (None: not one of the bridge's)."""
        bj = backend_job_from_jobset(obj, deleted=deleted)
        key = key_of(obj)
        if bj is None or key is None:
            return None
        pods = self.pods.get(key)
        if pods is None:
            return bj
        nodes = tuple(sorted(set(pods.nodes.values())))
        changes: dict[str, Any] = {"nodes": nodes}
        if bj.state is BackendState.FAILED and pods.failed:
            pod, (code, why) = sorted(pods.failed.items())[0]
            changes.update(exit_code=code, detail=f"pod {pod}: {why}")
        if bj.state is BackendState.RUNNING and not nodes:
            changes["state"] = BackendState.PENDING
            changes["reason"] = "PodsNotScheduled"
        return replace(bj, **changes)

    def sync_jobsets(self, objs: Iterable[dict[str, Any]]) -> list[BackendJob]:
        """A complete listing: replaces what was known; every JobSet's view."""
        self.jobsets = {}
        self._by_name = {}
        self._shown = {}
        jobs = []
        for obj in objs:
            key = key_of(obj)
            bj = self.backend_job(obj)
            if bj is not None and key is not None:
                self._keep(key, obj)
                self._shown[key] = bj
                jobs.append(bj)
        return jobs

    def _keep(self, key: Key, obj: dict[str, Any]) -> None:
        self.jobsets[key] = obj
        self._by_name[(key[0], str(_meta(obj).get("name")))] = key

    def jobset_event(self, obj: dict[str, Any], deleted: bool) -> BackendJob | None:
        """One watch event of a JobSet; its view (None: not one of the bridge's)."""
        key = key_of(obj)
        bj = self.backend_job(obj, deleted=deleted)
        if bj is None or key is None:
            return None
        if deleted:
            gone = self.jobsets.pop(key, None)
            self.pods.pop(key, None)
            self._shown.pop(key, None)
            name = (key[0], str(_meta(gone if gone is not None else obj).get("name")))
            if self._by_name.get(name) == key:
                del self._by_name[name]
        else:
            self._keep(key, obj)
        return bj

    def news(self, bj: BackendJob) -> bool:
        """Whether ``bj`` (a view this cache made) differs from the last view of its
        JobSet that this was asked about, which it then becomes. Most pod and JobSet
        events change no view (a pod's containers starting, a replicated job's ready
        count): the engine is handed only views that changed, since each costs it a
        store read (most of the daemon's status work while 200 TrainJobs ran, py-spy).
        A listing (``sync_jobsets``) shows every view it returns; a JobSet's deletion
        forgets its view. A finished view is always news: should the engine have failed
        to apply it (a full disk), the job's next event delivers it again, instead of
        the job staying Running until the watch lists again."""
        key = (bj.namespace or "", bj.job_uid)
        if self._shown.get(key) == bj and not bj.state.finished:
            return False
        if key in self.jobsets:  # not kept for a view of a JobSet already gone
            self._shown[key] = bj
        return True

    def jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The watched JobSet ``namespace/name``, if any."""
        key = self._by_name.get((namespace, name))
        obj = self.jobsets.get(key) if key is not None else None
        return obj if obj is not None and _meta(obj).get("name") == name else None

    def replicated_status_of(self, obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The ``jobsStatus`` kept now for the JobSet ``obj`` names (by its namespace and
        job uid; None when none is kept)."""
        key = key_of(obj)
        kept = self.jobsets.get(key) if key is not None else None
        return replicated_jobs_status(kept) if kept is not None else None

    def jobs_status(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        """The ``replicatedJobsStatus`` of job ``job_uid``'s JobSet in ``namespace``
        (None when the watch has not seen it there)."""
        obj = self.jobsets.get((namespace, job_uid))
        return replicated_jobs_status(obj) if obj is not None else None

    # -- pods ------------------------------------------------------------------------

    def pods_of(self, namespace: str, job_uid: str) -> PodsSeen | None:
        return self.pods.get((namespace, job_uid))

    def pod_events(self, objs: Iterable[Mapping[str, Any]], *, deleted: bool = False,
                   sync: bool = False, source: PodSource = BOUND) -> list[BackendJob]:
        """Pods listed (``sync``: a complete listing of ``source``'s selection) or one
        watch event of ``source``; the views of the watched JobSets whose pods changed.
        A listing of the bound pods replaces the nodes known (those of pods that ended
        before it are not listed: a finished job's nodes are in the store already);
        failures stay known until their JobSet is deleted."""
        if sync and source == BOUND:
            for seen in self.pods.values():
                seen.nodes.clear()
        touched = {k for obj in objs
                   if (k := self._note_pod(obj, deleted, source)) is not None}
        return [bj for k in sorted(touched) if k in self.jobsets
                and (bj := self.backend_job(self.jobsets[k])) is not None]

    def _note_pod(self, obj: Mapping[str, Any], deleted: bool, source: PodSource) -> Key | None:
        key = key_of(obj)
        if key is None:
            return None
        meta = _meta(obj)
        name = str(meta.get("name"))
        pods = self.pods.setdefault(key, PodsSeen(namespace=key[0]))
        if deleted:  # gone, or out of the watch's selection (see PodsSeen)
            if meta.get("deletionTimestamp"):
                pods.nodes.pop(name, None)
            elif source == BOUND and name not in pods.failed_phase:
                pods.failed.pop(name, None)  # ended: a restart explains nothing now
            return key
        node = (obj.get("spec") or {}).get("nodeName")
        if node:
            pods.nodes[name] = str(node)
        status = obj.get("status") or {}
        failure = container_failure(obj)
        if status.get("phase") == "Succeeded" or _recovered(status):
            pods.failed.pop(name, None)  # an earlier restart explains nothing now
            pods.failed_phase.discard(name)
        elif name in pods.failed and meta.get("deletionTimestamp"):
            # Killed while going (a Job out of retries): the first failure says why.
            if status.get("phase") == "Failed":
                pods.failed_phase.add(name)
        elif status.get("phase") == "Failed":
            pods.failed[name] = failure or (
                None, status.get("reason") or status.get("message") or "pod failed")
            pods.failed_phase.add(name)
        elif failure is not None:  # a container restarted in place (OnFailure)
            pods.failed[name] = failure
        index = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
        rjob = (meta.get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name")
        if index == "0" and rjob != CACHE and (pods.first is None or rjob == "launcher"):
            pods.first = name
        return key


def _recovered(status: Mapping[str, Any]) -> bool:
    """A running pod whose containers all run and are ready: restarted, and well since
    (a later end, a deadline's kill, is its own story)."""
    statuses = status.get("containerStatuses") or []
    return status.get("phase") == "Running" and bool(statuses) and all(
        cs.get("ready") and (cs.get("state") or {}).get("running") is not None
        for cs in statuses)
