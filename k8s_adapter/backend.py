"""The Kubernetes back end: TrainJobs run as JobSets (``jobset.x-k8s.io/v1alpha2``).

* ``submit`` creates the JobSet laid out by :func:`k8s_adapter.jobset.render_jobset`.
  It is idempotent: the JobSet carries the job uid as a label, and an existing JobSet
  of the same name and uid (a retry after a crash) is adopted, not an error. A JobSet
  of that name that belongs to another job is a refusal.
* Status is watched, not polled: one list-then-watch of the bridge's JobSets and two
  of their pods (label ``app.kubernetes.io/managed-by=hpc-bridge``): those bound and
  not finished, and those failed (:mod:`k8s_adapter.jobcache`), each resumed from the
  last resourceVersion and re-listed after ``410 Gone`` (:meth:`Kube.list_watch`).
  Every re-list is a complete snapshot; a JobSet deleted behind the bridge's back
  reports ``CANCELLED``.
* ``cancel`` deletes the JobSet with ``propagationPolicy: Foreground`` (its Jobs and
  pods go first); ``set_suspended`` patches ``spec.suspend``.
* A TrainJob CR that names a Kueue queue is laid out as Kueue admitted it, and resumed
  with Kueue's new decision after a preemption (:mod:`k8s_adapter.kueue`).
* ``inventory`` is nodes' allocatable minus the requests of the pods on them, with
  the topology from the configured node labels (:mod:`k8s_adapter.inventory`), kept
  from a watch of the nodes and of the bound, unfinished pods (no API call per
  placement).

* Identity (:mod:`k8s_adapter.access`): a local user's job is admitted only into the
  namespace an admin mapped the user to, and its JobSet, ConfigMap and Secret are
  created — and later deleted or patched — *impersonating* the mapped service account
  (a dry-run Pod of each pod template first, so that a Pod Security refusal fails the
  job with the apiserver's words); its pods run as the user's uid/gid. Watches,
  inventory and logs use the bridge's own identity.

Settings (``[backends.NAME]``, ``kind = "kubernetes"``): ``kubeconfig`` (absent: the
in-cluster service account), ``context``, ``default_image``, ``service_account``,
``scheduler_name``, ``topology_labels`` (top level first), ``request_timeout``;
``users``, ``groups``, ``namespace_accounts``, ``allow_privileges`` (identity).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

import structlog

from bridge.backend import (
    BackendJob,
    BackendRejected,
    Inventory,
    Owner,
    StatusBatch,
    SubmitRequest,
)
from bridge.model import GROUP as TRAINER_GROUP
from bridge.model import VERSION as TRAINER_VERSION
from bridge.model import TrainJob
from bridge.plugin_settings import parse_settings
from bridge.runtimes import LaunchPlan
from k8s_adapter import data_cache, kueue, sshauth, trainer_status
from k8s_adapter import dependents as dependents_of
from k8s_adapter.access import (
    ANN_IDENTITY,
    ANN_ORIGIN,
    AccessPolicy,
    access_policy,
    from_cr_door,
)
from k8s_adapter.capacity import (
    BOUND_PODS,
    NODES,
    OTHER_BOUND_PODS,
    OTHER_PODS,
    Capacity,
)
from k8s_adapter.identity import Identity
from k8s_adapter.inventory import inventory_from_nodes
from k8s_adapter.jobcache import BOUND, FAILED, FAILED_PODS, JobCache, PodSource
from k8s_adapter.jobset import (
    GROUP,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PLURAL,
    UID_LABEL,
    VERSION,
    JobSetOptions,
    controller_reference,
    hostfile_configmap,
    jobset_name,
    needs_hostfile,
    render_jobset,
)
from k8s_adapter.jobset_status import split_id
from k8s_adapter.kube import JSON_PATCH, MERGE_PATCH, Kube, KubeSettings, is_status
from k8s_adapter.kueue_admission import admitted_body, resume_operations
from k8s_adapter.kueue_topology import handed
from k8s_adapter.options import SUPPORT
from k8s_adapter.settings import KubernetesSettings

__all__ = ["ANN_ORIGIN", "KubernetesBackend", "create"]


def _render(request: SubmitRequest, options: JobSetOptions,
            owner_ref: dict[str, Any] | None) -> dict[str, Any]:
    """:func:`render_jobset`; a job whose data it cannot lay out (a runtime patch of
    the wrong shape deep down) is :class:`BackendRejected`, never another error."""
    try:
        return render_jobset(request, options, owner_ref)
    except BackendRejected:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError,
            StopIteration) as exc:  # a StopIteration out of a coroutine: RuntimeError
        raise BackendRejected(f"the JobSet cannot be laid out: {type(exc).__name__}: "
                              f"{str(exc)[:300]}") from None

log = structlog.get_logger(__name__)

DEFAULT_TOPOLOGY_LABELS = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
MAX_LOG_BYTES = 1 << 20


class KubernetesBackend:
    """:class:`bridge.backend.Backend` on a kube-apiserver with the JobSet controller."""

    #: A TrainJob node is a pod; several may share a Kubernetes node.
    packs_units = True
    runs_pods = True
    #: What Kubernetes does with each scheduling option (k8s_adapter/options.py).
    option_support = SUPPORT
    #: A job's ``spec.initializer.dataset`` starts cache servers as a replicated job of
    #: its JobSet (k8s_adapter/data_cache.py, bridge/dataset.py).
    runs_data_cache = True

    def __init__(self, name: str, kube: KubeSettings, options: JobSetOptions,
                 access: AccessPolicy | None = None,
                 amend: Callable[[dict[str, Any], SubmitRequest], None] | None = None):
        self.name = name
        #: Changes a composing back end makes to every rendered JobSet, before the
        #: identity's checks and the dry run (:mod:`pool_adapter`: suspended, pinned).
        self.amend = amend
        self.kube = Kube(kube)
        self.options = options
        self.access = access or access_policy(f"backends.{name}", {})
        self._cache = JobCache()
        self._capacity = Capacity()
        self._jobs_status_listeners: list[Callable[[str], None]] = []

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        await self.kube.connect()

    async def close(self) -> None:
        await self.kube.close()

    def queue_places(self, job: TrainJob) -> bool:
        """Whether Kueue places ``job``'s pods (a TrainJob CR it queues): the bridge's
        topology request is handed to it (k8s_adapter/kueue_topology.py), not waited
        for nor pinned."""
        return from_cr_door(job) and kueue.managed(job)

    def topology_handed(self, job: TrainJob) -> bool:
        """Whether ``job`` carries the bridge's topology request for Kueue."""
        return handed(job.spec.runtime_patches)

    @property
    def topology_labels(self) -> tuple[str, ...]:
        """The node label keys of its topology levels, widest first (its setting)."""
        return self.options.topology_labels

    # -- jobs ------------------------------------------------------------------------

    def check_admission(self, job: TrainJob, plan: LaunchPlan, owner: Owner,
                        origin: str) -> None:
        """:class:`bridge.backend.Admitting`: the access policy (:mod:`k8s_adapter.access`)."""
        self.access.admit(job, plan, owner, origin)

    def validate(self, request: SubmitRequest) -> None:
        """At admission (:class:`bridge.backend.Validating`): the JobSet renders, so that
        a job Kubernetes could not be given (no image, a runtime patch of the wrong
        shape) is refused (400) rather than failing at submission."""
        self._render(request, None)

    def _render(self, request: SubmitRequest, owner_ref: dict[str, Any] | None
                ) -> dict[str, Any]:
        body = _render(request, self.options, owner_ref)
        if self.amend is not None:
            self.amend(body, request)
        return body

    def jobset_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The JobSet as the status watch last saw it (None: not seen)."""
        return self._cache.jobset(namespace, name)

    async def jobset_client(self, namespace: str, name: str) -> Kube:
        """The client acting as the identity the JobSet was created as."""
        return await self._jobset_client(namespace, name)

    def _client(self, identity: Identity | None) -> Kube:
        return self.kube if identity is None else self.kube.impersonating(identity.username)

    async def submit(self, request: SubmitRequest) -> str:
        """Create the JobSet (see the module docstring) as the job's identity. An MPI
        job's ConfigMap and SSH Secret, and a data cache's token Secret, are created
        *first* (a retry finds them: 409 is fine, and what the first attempt made stays),
        so that the JobSet never exists without them; once it exists they are handed to
        it as owner (garbage-collected with it)."""
        job = request.job
        identity = self.access.identity_of(job, request.owner)
        kube = self._client(identity)
        owner_ref = None
        if from_cr_door(job) and job.metadata.uid:
            owner_ref = controller_reference(f"{TRAINER_GROUP}/{TRAINER_VERSION}", "TrainJob",
                                             job.metadata.name, job.metadata.uid)
        if owner_ref is not None and kueue.managed(job):  # as Kueue admitted it
            body = await admitted_body(self.kube, self.access, request,
                                       lambda r: self._render(r, owner_ref))
        else:
            body = self._render(request, owner_ref)
        self.access.secure(body, job, request.owner, self.options.service_account,
                           impersonated=identity is not None)
        annotations = body["metadata"].setdefault("annotations", {})
        annotations.pop(ANN_IDENTITY, None)
        if identity is not None:
            annotations[ANN_IDENTITY] = str(identity)
            await self._admission_dry_run(kube, body)
        namespace = body["metadata"]["namespace"]
        name = jobset_name(request)
        dependents: list[dependents_of.Dependent] = []
        if needs_hostfile(request):
            cm = hostfile_configmap(name, namespace, request, None)
            private, public = await sshauth.keypair()
            dependents += [dependents_of.config_map(kube, cm), dependents_of.secret(
                kube, sshauth.secret(name, namespace, dict(cm["metadata"]["labels"]),
                                     private, public))]
        if request.plan.data_cache is not None:  # the cache's token: a retry keeps the first
            dependents.append(dependents_of.secret(kube, data_cache.secret(
                name, namespace, {MANAGED_BY_LABEL: MANAGED_BY_VALUE, UID_LABEL: request.job_uid},
                data_cache.new_credentials()), own_only=True))
        report = request.status_secret
        if report:  # progress reports (k8s_adapter/trainer_status.py)
            try:
                trainer_status.mount(body, name, report["url"])
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise BackendRejected(f"the JobSet cannot be laid out: {exc}") from None
            dependents.append(dependents_of.secret(kube, trainer_status.secret(
                name, namespace, {UID_LABEL: request.job_uid}, report["token"],
                report["ca.crt"]), refresh=True))
        await dependents_of.create_all(kube, namespace, dependents, request.job_uid)
        try:
            created = await kube.call(
                f"create JobSet {namespace}/{name}", kube.custom.create_namespaced_custom_object,
                GROUP, VERSION, namespace, PLURAL, body)
        except BackendRejected as exc:
            if not is_status(exc, 409):
                raise
            created = await kube.call(
                f"get JobSet {namespace}/{name}", kube.custom.get_namespaced_custom_object,
                GROUP, VERSION, namespace, PLURAL, name)
            labels = (created.get("metadata") or {}).get("labels") or {}
            if labels.get(UID_LABEL) != request.job_uid:
                raise BackendRejected(
                    f"a JobSet named {namespace}/{name} exists and is not this job's "
                    f"(its {UID_LABEL} is {labels.get(UID_LABEL)!r})") from None
            log.info("JobSet %s/%s already exists for this job; adopted", namespace, name)
        await dependents_of.hand_over(kube, namespace, dependents, name,
                                      created["metadata"].get("uid"))
        return f"{namespace}/{name}"

    async def _admission_dry_run(self, kube: Kube, body: Mapping[str, Any]) -> None:
        """Create each pod template as a Pod with ``dryRun=All`` as the job's identity:
        a Pod Security refusal (which would otherwise only show in the Job's events)
        fails the job now, with the apiserver's message. Nothing is persisted."""
        namespace = body["metadata"]["namespace"]
        for rj in body["spec"]["replicatedJobs"]:
            template = rj["template"]["spec"]["template"]
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"{body['metadata']['name']}-{rj['name']}-check",
                                "namespace": namespace,
                                "labels": dict((template.get("metadata") or {}).get("labels")
                                               or {})},
                   "spec": template["spec"]}
            await kube.call(f"create pods of replicatedJob {rj['name']!r} in {namespace} "
                            f"(dry run)", kube.core.create_namespaced_pod, namespace, pod,
                            dry_run="All")

    async def _jobset_client(self, namespace: str, name: str) -> Kube:
        """The client acting as the identity a JobSet was created as (its annotation,
        trusted only for an account of the JobSet's own namespace)."""
        obj = self._cache.jobset(namespace, name)
        if obj is None:
            try:
                obj = await self.kube.call(
                    f"get JobSet {namespace}/{name}", self.kube.custom.get_namespaced_custom_object,
                    GROUP, VERSION, namespace, PLURAL, name)
            except BackendRejected as exc:
                if not is_status(exc, 404):
                    raise
                return self.kube
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_IDENTITY)
        identity = Identity.parse(str(text)) if text else None
        if identity is None or identity.namespace != namespace:
            return self.kube
        return self._client(identity)
    async def _list_jobsets(self) -> list[dict[str, Any]]:
        listing = await self.kube.call(
            "list JobSets", self.kube.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
            label_selector=SELECTOR)
        return list(listing.get("items") or [])

    async def jobsets_of(self, job_uids: Collection[str]
                         ) -> list[tuple[dict[str, Any], BackendJob]]:
        """Every JobSet labelled with one of these uids, with its state, from one list."""
        wanted = set(job_uids)
        return [(obj, bj) for obj in await self._list_jobsets()
                if (bj := self._cache.backend_job(obj)) is not None and bj.job_uid in wanted]

    def state_of(self, obj: Mapping[str, Any]) -> BackendJob | None:
        """JobSet ``obj`` as the engine would see it from this back end (its pods' nodes
        and failures included); None when it is not one of the bridge's."""
        return self._cache.backend_job(obj)

    def known_nodes(self) -> list[dict[str, Any]]:
        """The nodes as the inventory's watch last listed them (trimmed: names, labels)."""
        return self._capacity.known_nodes()

    def bound_pods(self) -> list[dict[str, Any]]:
        """The unfinished pods bound to a node, as the inventory's watch last listed
        them (trimmed: names, node, node selector, resources, phase)."""
        return self._capacity.bound_pods()

    def capacity_version(self) -> int:
        """A number that changes whenever :meth:`known_nodes` or :meth:`bound_pods`
        does."""
        return self._capacity.version

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        """Every JobSet labelled with one of these uids, in any namespace (the engine
        keeps the one in the job's own namespace: :mod:`bridge.ownership`)."""
        wanted = set(job_uids)
        return [bj for obj in await self._list_jobsets()
                if (bj := self._cache.backend_job(obj)) is not None and bj.job_uid in wanted]

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        namespace, name = split_id(backend_id)
        kube = await self._jobset_client(namespace, name)
        try:
            await kube.call(
                f"delete JobSet {backend_id}", kube.custom.delete_namespaced_custom_object,
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Foreground")
        except BackendRejected as exc:
            if not is_status(exc, 404):
                raise

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        """Suspend (pods deleted, Jobs kept) or resume the JobSet through ``spec.suspend``
        (as the namespace's identity, whoever ``owner`` is: admission checked them); the
        resume of a JobSet laid out for Kueue carries Kueue's new decision in the same
        JSON patch (:func:`k8s_adapter.kueue_admission.resume_operations`)."""
        namespace, name = split_id(backend_id)
        kube = await self._jobset_client(namespace, name)
        ops = None if suspend else await resume_operations(self.kube, self.access,
                                                           namespace, name)
        if ops:  # Kueue's new decision goes in with the resume (k8s_adapter/kueue.py)
            await kube.call(
                f"patch JobSet {backend_id}", kube.custom.patch_namespaced_custom_object,
                GROUP, VERSION, namespace, PLURAL, name,
                [*ops, {"op": "replace", "path": "/spec/suspend", "value": False}],
                _content_type=JSON_PATCH)
            return
        await kube.call(
            f"patch JobSet {backend_id}", kube.custom.patch_namespaced_custom_object,
            GROUP, VERSION, namespace, PLURAL, name, {"spec": {"suspend": suspend}},
            _content_type=MERGE_PATCH)

    def jobs_status(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        """The ``replicatedJobsStatus`` of the job's JobSet in ``namespace`` as a TrainJob
        ``jobsStatus`` (None when the watch has not seen it there)."""
        return self._cache.jobs_status(namespace, job_uid)

    def on_jobs_status(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """:class:`bridge.backend.ReportsJobsStatus`: told by the JobSet watch, for
        each JobSet whose ``replicatedJobsStatus`` changed (every one on a re-list)."""
        self._jobs_status_listeners.append(listener)

        def stop() -> None:
            if listener in self._jobs_status_listeners:
                self._jobs_status_listeners.remove(listener)
        return stop

    def _jobs_status_changed(self, job_uids: Collection[str]) -> None:
        """Tell each listener of each uid; a listener that raises is logged, and
        neither the others nor the JobSet watch that calls this stop for it."""
        for uid in job_uids:
            for listener in list(self._jobs_status_listeners):
                try:
                    listener(uid)
                except Exception:
                    log.exception("a jobsStatus listener failed", job_uid=uid)

    # -- status ----------------------------------------------------------------------

    async def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
        #: Batches, and (last) a watch task that ended.
        queue: asyncio.Queue[StatusBatch | asyncio.Task[None]] = asyncio.Queue()

        async def jobsets() -> None:
            async for kind, payload in self.kube.list_watch(
                    "JobSets", self.kube.custom.list_cluster_custom_object, GROUP, VERSION,
                    PLURAL, label_selector=SELECTOR):
                now = time.time()
                if kind == "SYNC":
                    # Those gone since the last listing change too (to None).
                    uids = {uid for _, uid in self._cache.jobsets}
                    jobs = self._cache.sync_jobsets(payload)
                    queue.put_nowait(StatusBatch(tuple(jobs), complete=True, at=now))
                    self._jobs_status_changed(sorted(uids | {bj.job_uid for bj in jobs}))
                    continue
                before = self._cache.replicated_status_of(payload)
                bj = self._cache.jobset_event(payload, deleted=kind == "DELETED")
                if bj is not None:
                    if kind == "DELETED" or self._cache.news(bj):
                        queue.put_nowait(StatusBatch((bj,), complete=False, at=now))
                    if kind == "DELETED" or before != self._cache.replicated_status_of(payload):
                        self._jobs_status_changed([bj.job_uid])

        async def pods(what: str, source: PodSource, selected: str) -> None:
            async for kind, payload in self.kube.list_watch(
                    what, self.kube.core.list_pod_for_all_namespaces,
                    label_selector=SELECTOR, field_selector=selected):
                jobs = self._cache.pod_events(payload if kind == "SYNC" else [payload],
                                              deleted=kind == "DELETED", sync=kind == "SYNC",
                                              source=source)
                jobs = [bj for bj in jobs if self._cache.news(bj) or kind == "SYNC"]
                if source == BOUND:
                    self._capacity.note_own(kind, payload)
                if jobs:
                    queue.put_nowait(StatusBatch(tuple(jobs), complete=False, at=time.time()))

        # The job's pods that hold a node (their nodes, in-place restarts, tlog's pod, the
        # inventory's own pods) and those that failed (why): a pod that runs and succeeds
        # is three events, not seven (created, bound, running, succeeded twice, deleting,
        # deleted); a pod leaving a selection comes as DELETED (jobcache.py).
        tasks = [asyncio.create_task(jobsets(), name=f"{self.name}-watch-jobsets"),
                 asyncio.create_task(pods("pods", BOUND, BOUND_PODS),
                                     name=f"{self.name}-watch-pods"),
                 asyncio.create_task(pods("failed pods", FAILED, FAILED_PODS),
                                     name=f"{self.name}-watch-failed-pods"),
                 asyncio.create_task(self._follow_capacity(NODES, self.kube.core.list_node),
                                     name=f"{self.name}-watch-nodes"),
                 asyncio.create_task(self._follow_capacity(
                     OTHER_BOUND_PODS, self.kube.core.list_pod_for_all_namespaces,
                     field_selector=BOUND_PODS, label_selector=OTHER_PODS),
                     name=f"{self.name}-watch-bound-pods")]
        # A watch task that ends (list_watch never does: a bug did) ends this stream
        # with its error, so that the engine starts it again, rather than this stream
        # going on without that watch.
        for t in tasks:
            t.add_done_callback(queue.put_nowait)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, StatusBatch):
                    yield item
                    continue
                raise RuntimeError(f"{self.name}: watch task {item.get_name()} ended") from (
                    None if item.cancelled() else item.exception())
        finally:
            # Not followed any more: inventory() lists again until a new watch has.
            self._capacity.synced.clear()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- capacity and output ---------------------------------------------------------

    async def _follow_capacity(self, source: str, list_fn: Any, **selector: Any) -> None:
        """Keep one source of the inventory (:mod:`k8s_adapter.capacity`) from its
        watch: a placement then costs no API call."""
        async for kind, payload in self.kube.list_watch(source, list_fn, **selector):
            self._capacity.note(source, kind, payload)

    async def inventory(self) -> Inventory:
        """From the watches once all have listed; before that (and when the status
        watch is not running) from one list of nodes and one of bound pods."""
        kept = self._capacity.inventory(self.options.topology_labels)
        if kept is not None:
            return kept
        nodes = await self.kube.raw("list nodes", self.kube.core.list_node)
        pods = await self.kube.raw("list pods", self.kube.core.list_pod_for_all_namespaces,
                                   field_selector=BOUND_PODS)
        return inventory_from_nodes(nodes.get("items") or [], pods.get("items") or [],
                                    self.options.topology_labels)

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        """The log of the job's first pod (the launcher for MPI). Kubernetes keeps one
        stream per container, so ``stderr`` is empty: it is in ``stdout``."""
        namespace = job.backend_id.partition("/")[0]
        pods = self._cache.pods_of(namespace, job.job_uid)
        if stream != "stdout" or pods is None or pods.first is None:
            return b"", offset
        try:
            text = await self.kube.call(
                f"read the log of pod {pods.first}", self.kube.core.read_namespaced_pod_log,
                pods.first, pods.namespace, container="node", limit_bytes=offset + MAX_LOG_BYTES)
        except BackendRejected as exc:
            if is_status(exc, 400, 404):
                return b"", offset
            raise
        data = str(text or "").encode()
        return data[offset:], max(offset, len(data))


KNOWN_SETTINGS = frozenset(KubernetesSettings.model_fields)


def create(name: str, settings: Mapping[str, Any]) -> KubernetesBackend:
    """Entry point ``hpc_bridge.backends: kubernetes``: settings as
    :class:`k8s_adapter.settings.KubernetesSettings`. Raises ValueError naming
    ``backends.NAME.KEY`` for an unknown or malformed setting."""
    s = parse_settings(KubernetesSettings, f"backends.{name}", settings)
    options = JobSetOptions(default_image=s.default_image, service_account=s.service_account,
                            scheduler_name=s.scheduler_name,
                            topology_labels=(DEFAULT_TOPOLOGY_LABELS if s.topology_labels is None
                                             else s.topology_labels))
    return KubernetesBackend(name, s.kube(), options,
                             access_policy(f"backends.{name}", settings))
