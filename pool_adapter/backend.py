"""The ``k8s-on-slurm`` back end: Slurm allocates, then the JobSet binds.

* ``submit``: (1) the JobSet, *suspended*, tolerating the pool's taint, one training pod
  per node (the Kubernetes back end's submit, idempotent by name and uid label;
  :mod:`pool_adapter.pinning`); (2) the holder, a Slurm batch job of the job's whole
  shape as its owner, carrying the bridge's key (looked up first: a retry after a crash
  finds the first one). The id is ``namespace/name@slurmid``. The JobSet comes first,
  so a holder never exists without the JobSet it holds nodes for.
* ``watch`` merges Slurm's snapshots of the holders and the JobSet watch, and from
  each pair :func:`pool_adapter.holder.compose` gives the job's state and the action
  that keeps both worlds in line: pin the JobSet to a running holder's nodes, end the
  holder as the JobSet ended, delete the JobSet of a holder that ended first, cancel
  the holder of a deleted JobSet. Actions are idempotent and retried while the state
  that asked for them holds (at most every ``RETRY_SECONDS``).
* A holder is a job's only when it carries the job's key AND its Slurm owner is the uid
  recorded on the JobSet: another user's job with a forged key never binds, ends or
  deletes anything.
* ``cancel`` deletes the JobSet and cancels the holder; ``set_suspended`` holds the
  holder (it leaves its nodes) and suspends and unpins the JobSet; resuming releases
  the holder, and the JobSet is pinned again when Slurm starts it.
* ``inventory`` is Slurm's (its switches): the placement engine predicts on Slurm's
  nodes, Slurm decides; the JobSet follows Slurm's choice.

Settings (``kind = "k8s-on-slurm"``): ``slurm`` (a Slurm back end's settings),
``kubernetes`` (a Kubernetes back end's), ``taint_key``, ``pool_label``, ``node_map``,
``node_table`` (:mod:`pool_adapter.settings`).
"""

from __future__ import annotations

import asyncio
import pwd
import time
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import structlog

from bridge.backend import (
    BackendError,
    BackendJob,
    BackendRejected,
    Inventory,
    Owner,
    StatusBatch,
    SubmitRequest,
)
from bridge.model import TrainJob
from bridge.plugin_settings import parse_settings
from bridge.runtimes import LaunchPlan
from k8s_adapter import backend as k8s_backend
from k8s_adapter.jobset import GROUP, PLURAL, VERSION
from k8s_adapter.kube import JSON_PATCH
from pool_adapter import pinning
from pool_adapter.holder import (
    HOLDER_COMMENT,
    Composed,
    Do,
    JobSetView,
    compose,
    holder_script,
)
from pool_adapter.nodemap import NodeMap
from pool_adapter.nodestate import NodeStates
from pool_adapter.options import SUPPORT
from pool_adapter.settings import PoolSettings
from slurm_adapter import backend as slurm_backend

log = structlog.get_logger(__name__)

#: Seconds before an action whose effect has not shown yet is tried again.
RETRY_SECONDS = 5.0
#: Seconds a holder of this back end must be seen without its JobSet before it is
#: cancelled as an orphan (a JobSet just created may not have reached the watch yet).
ORPHAN_GRACE = 10.0


def split_pool_id(backend_id: str) -> tuple[str, str | None]:
    """``namespace/name@slurmid`` → (``namespace/name``, slurm id or None)."""
    jobset, sep, holder = backend_id.partition("@")
    if "/" not in jobset or (sep and not holder.isdigit()):
        raise BackendRejected(f"not a k8s-on-slurm id (namespace/name@slurmid): "
                              f"{backend_id!r}")
    return jobset, holder or None


def owner_of(uid: int) -> Owner:
    """The Unix account of ``uid`` (a holder's owner, for acting on it as them)."""
    entry = pwd.getpwuid(uid)
    return Owner(uid=uid, gid=entry.pw_gid, user=entry.pw_name)


@dataclass
class _Pair:
    """One job as the two worlds last showed it."""

    jobset_id: str
    holder: BackendJob | None = None


class PoolBackend:
    """:class:`bridge.backend.Backend` over a Slurm and a Kubernetes back end."""

    #: One pod per node: a TrainJob node is a whole allocated Slurm node.
    packs_units = False
    runs_pods = True
    option_support = SUPPORT
    #: Not yet: the cache's pods would need their own allocation (docs/data-cache.md).
    runs_data_cache = False

    def __init__(self, name: str, slurm: slurm_backend.SlurmBackend,
                 k8s: k8s_backend.KubernetesBackend, nodes: NodeMap, taint_key: str,
                 pool_label: str | None, node_state_interval: float = 30.0):
        self.name = name
        self.node_states = NodeStates(name, slurm, k8s, nodes, pool_label,
                                      node_state_interval)
        #: Holders of this back end without a JobSet: Slurm id -> when first seen so.
        self._orphans: dict[str, float] = {}
        self.slurm = slurm
        self.k8s = k8s
        self.nodes = nodes
        k8s.amend = partial(pinning.amend, pool=name, taint_key=taint_key,
                            pool_label=pool_label)
        #: job uid -> its JobSet id and its holder (the owner's, from the last snapshot).
        self._pairs: dict[str, _Pair] = {}
        self._k8s_synced = False
        #: (uid, action, holder id) -> when it was last started.
        self._acted: dict[tuple[str, Do, str], float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: Slurm ids whose node labels were removed after they ended.
        self._unlabelled: set[str] = set()

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        await self.slurm.start()
        await self.k8s.start()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.k8s.close()
        await self.slurm.close()

    # -- admission ---------------------------------------------------------------------

    def check_admission(self, job: TrainJob, plan: LaunchPlan, owner: Owner,
                        origin: str) -> None:
        """The Kubernetes back end's access policy (user → namespace, identity)."""
        self.k8s.check_admission(job, plan, owner, origin)

    def validate(self, request: SubmitRequest) -> None:
        """The JobSet renders (with the pool's changes)."""
        self.k8s.validate(replace(request, placement=None))

    # -- jobs ---------------------------------------------------------------------------

    def _holder_request(self, request: SubmitRequest, jobset_id: str) -> SubmitRequest:
        """The job's request as a holder: its shape and Slurm options, no output file
        (the holder prints nothing), its comment naming the JobSet. No node list: the
        placement's prediction is recorded by the engine; Slurm decides."""
        options = request.options.model_copy(update={
            "output": "/dev/null", "error": None, "comment": self._holder_note(jobset_id)})
        return replace(request, options=options, placement=None)

    def _holder_note(self, jobset_id: str) -> str:
        """What follows the key in a holder's comment: ``k8s-on-slurm:POOL ns/name``."""
        return f"{HOLDER_COMMENT}:{self.name} {jobset_id}"

    async def submit(self, request: SubmitRequest) -> str:
        """See the module docstring: the JobSet, then the holder (one per job)."""
        jobset_id = await self.k8s.submit(replace(request, placement=None))
        holders = [h for h in await self.slurm.lookup([request.job_uid])
                   if h.owner_uid == request.owner.uid and not h.state.finished]
        if holders:
            holder_id = holders[0].backend_id
            log.info("job %s: holder Slurm job %s already exists; adopted",
                     request.job_uid, holder_id)
        else:
            try:
                script = holder_script(jobset_id, request.job_uid)
            except ValueError as exc:
                raise BackendRejected(str(exc)) from None
            holder_id = await self.slurm.submit(self._holder_request(request, jobset_id),
                                                script)
        return f"{jobset_id}@{holder_id}"

    def _view(self, jobset_id: str) -> JobSetView | None:
        """The JobSet as the watch last saw it, if it is this back end's."""
        namespace, _, name = jobset_id.partition("/")
        obj = self.k8s.jobset_object(namespace, name)
        if obj is None:
            return None
        return self._view_of(obj)

    def _view_of(self, obj: dict[str, Any]) -> JobSetView | None:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if annotations.get(pinning.ANN_POOL) != self.name:
            return None
        bj = self.k8s.state_of(obj)
        if bj is None:
            return None
        return JobSetView(bj, bool((obj.get("spec") or {}).get("suspend")),
                          pinning.pinned_to(obj))

    @staticmethod
    def _owner_uid(obj: Mapping[str, Any]) -> int | None:
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(pinning.ANN_OWNER_UID)
        return int(text) if isinstance(text, str) and text.isdigit() else None

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        """Each of these jobs whose JobSet (this back end's) and holder (its recorded
        owner's) both exist, composed. A JobSet without a holder is not reported: the
        engine submits again, which adopts the JobSet and makes the holder."""
        holders = await self.slurm.lookup(job_uids)
        found: list[BackendJob] = []
        for obj, js in await self.k8s.jobsets_of(job_uids):
            view = self._view_of(obj)
            owner = self._owner_uid(obj)
            if view is None or owner is None:
                continue
            for h in holders:
                if h.job_uid == js.job_uid and h.owner_uid == owner:
                    composed = compose(f"{js.backend_id}@{h.backend_id}", h, view, True)
                    if composed.job is not None:
                        found.append(composed.job)
        return found

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        """Delete the JobSet, cancel the holder (both: a missing one is no error)."""
        jobset_id, holder_id = split_pool_id(backend_id)
        await self.k8s.cancel(jobset_id, owner)
        if holder_id is not None:
            await self.slurm.cancel(holder_id, owner)

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        """Suspend: the holder is held (requeued if it runs: it leaves its nodes), the
        JobSet suspended and unpinned. Resume: the holder is released; the watch pins
        the JobSet again once Slurm starts it."""
        jobset_id, holder_id = split_pool_id(backend_id)
        if holder_id is None:
            raise BackendRejected(f"{backend_id}: no Slurm job to suspend")
        await self.slurm.set_suspended(holder_id, suspend, owner)
        if suspend:
            await self._repin(jobset_id, None)

    def jobs_status(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        return self.k8s.jobs_status(namespace, job_uid)

    # -- binding --------------------------------------------------------------------------

    async def _repin(self, jobset_id: str, holder: BackendJob | None) -> None:
        """Pin the JobSet's pods to ``holder``'s nodes and unsuspend it (None: unpin and
        suspend). The nodes are labelled first, so no pod waits for a label."""
        namespace, _, name = jobset_id.partition("/")
        obj = self.k8s.jobset_object(namespace, name)
        if obj is None:
            return
        if holder is not None:
            names = self.nodes.to_kubernetes(holder.nodes, self.k8s.known_nodes())
            label = pinning.allocation_label(holder.backend_id)
            await self._unlabel(holder.backend_id, keep=set(names))
            for node in names:
                await self.k8s.kube.call(
                    f"label node {node} {label}", self.k8s.kube.core.patch_node, node,
                    {"metadata": {"labels": {label: "true"}}})
        kube = await self.k8s.jobset_client(namespace, name)
        ops = pinning.pin_patch(obj, holder.backend_id if holder else None,
                                suspend=holder is None)
        await kube.call(f"{'pin' if holder else 'unpin'} JobSet {jobset_id}",
                        kube.custom.patch_namespaced_custom_object, GROUP, VERSION,
                        namespace, PLURAL, name, ops, _content_type=JSON_PATCH)
        if holder is not None:
            log.info("JobSet %s pinned to Slurm job %s on %s", jobset_id, holder.backend_id,
                     ",".join(holder.nodes))

    async def _unlabel(self, slurm_id: str, keep: Collection[str] = ()) -> None:
        """Remove the allocation label of ``slurm_id`` from every node but ``keep``."""
        label = pinning.allocation_label(slurm_id)
        listing = await self.k8s.kube.raw(f"list nodes labelled {label}",
                                          self.k8s.kube.core.list_node, label_selector=label)
        for node in listing.get("items") or []:
            name = (node.get("metadata") or {}).get("name")
            if name and name not in keep:
                await self.k8s.kube.call(
                    f"unlabel node {name} {label}", self.k8s.kube.core.patch_node, name,
                    {"metadata": {"labels": {label: None}}})

    async def _act(self, uid: str, pair: _Pair, composed: Composed) -> None:
        holder = pair.holder
        assert holder is not None
        owner = owner_of(holder.owner_uid) if holder.owner_uid is not None else None
        if composed.action is Do.PIN:
            await self._repin(pair.jobset_id, holder)
        elif composed.action is Do.UNPIN:
            await self._repin(pair.jobset_id, None)
            await self._unlabel(holder.backend_id)
        elif composed.action is Do.END_HOLDER and owner is not None:
            assert composed.signal is not None
            await self.slurm.signal(holder.backend_id, composed.signal, owner)
        elif composed.action is Do.CANCEL_HOLDER and owner is not None:
            await self.slurm.cancel(holder.backend_id, owner)
        elif composed.action is Do.DELETE_JOBSET and owner is not None:
            await self.k8s.cancel(pair.jobset_id, owner)

    def _start_action(self, uid: str, pair: _Pair, composed: Composed) -> None:
        holder = pair.holder
        if composed.action is Do.NOTHING or holder is None:
            return
        key = (uid, composed.action, holder.backend_id)
        now = time.monotonic()
        if now - self._acted.get(key, -RETRY_SECONDS) < RETRY_SECONDS:
            return
        self._acted[key] = now
        self._spawn(f"{composed.action.value}-{uid}", self._act(uid, pair, composed))

    def _cleanup_labels(self, holder: BackendJob) -> None:
        """Once per ended holder (per daemon run): its nodes lose its label."""
        if holder.backend_id in self._unlabelled:
            return
        self._unlabelled.add(holder.backend_id)

        async def run() -> None:
            try:
                await self._unlabel(holder.backend_id)
            except BackendError:
                self._unlabelled.discard(holder.backend_id)  # the next pass tries again
                raise

        self._spawn(f"unlabel-{holder.backend_id}", run())

    def _compose(self, uid: str) -> BackendJob | None:
        """The job's state now, its action started."""
        pair = self._pairs.get(uid)
        if pair is None:
            return None
        view = self._view(pair.jobset_id)
        holder_id = pair.holder.backend_id if pair.holder else None
        composed = compose(f"{pair.jobset_id}@{holder_id}" if holder_id else pair.jobset_id,
                           pair.holder, view, self._k8s_synced)
        self._start_action(uid, pair, composed)
        if pair.holder is not None and pair.holder.state.finished:
            self._cleanup_labels(pair.holder)
        if view is None and self._k8s_synced and (pair.holder is None
                                                  or pair.holder.state.finished):
            del self._pairs[uid]  # both ended: nothing left to keep in line
        return composed.job

    # -- status ---------------------------------------------------------------------------

    def _take_holders(self, jobs: Collection[BackendJob]) -> None:
        """A complete Slurm snapshot: each pool job's holder (its recorded owner's; of
        several, the unfinished one)."""
        by_uid: dict[str, list[BackendJob]] = {}
        for bj in jobs:
            by_uid.setdefault(bj.job_uid, []).append(bj)
        for uid, pair in self._pairs.items():
            namespace, _, name = pair.jobset_id.partition("/")
            obj = self.k8s.jobset_object(namespace, name)
            owner = self._owner_uid(obj) if obj is not None else None
            mine = [h for h in by_uid.get(uid, ()) if owner is not None and h.owner_uid == owner]
            mine.sort(key=lambda h: (not h.state.finished, h.start_time or 0))
            pair.holder = mine[-1] if mine else None
        self._sweep_orphans(jobs)

    def _sweep_orphans(self, jobs: Collection[BackendJob]) -> None:
        """Cancel this back end's holders (their comment says so) that have had no
        JobSet for ``ORPHAN_GRACE`` seconds, as their owners: no Slurm allocation is
        held for a job that is gone."""
        if not self._k8s_synced:
            return
        now = time.monotonic()
        prefix = f"{HOLDER_COMMENT}:{self.name} "
        seen: set[str] = set()
        for h in jobs:
            if h.state.finished or not (h.note or "").startswith(prefix) \
                    or h.job_uid in self._pairs or h.owner_uid is None:
                continue
            seen.add(h.backend_id)
            first = self._orphans.setdefault(h.backend_id, now)
            if now - first < ORPHAN_GRACE:
                continue
            self._orphans[h.backend_id] = now  # at most once per grace
            log.warning("k8s-on-slurm %s: Slurm job %s holds nodes for JobSet %s, which does "
                        "not exist; cancelling it", self.name, h.backend_id,
                        (h.note or "")[len(prefix):])
            self._spawn(f"cancel-orphan-{h.backend_id}",
                        self.slurm.cancel(h.backend_id, owner_of(h.owner_uid)))
        for gone in set(self._orphans) - seen:
            del self._orphans[gone]

    def _spawn(self, what: str, coro: Any) -> None:
        """Run ``coro`` in the background; a failure is logged (the next pass retries)."""
        async def run() -> None:
            try:
                await coro
            except (BackendError, ValueError, KeyError) as exc:
                log.warning("k8s-on-slurm %s: %s failed (retried): %s", self.name, what, exc)
            except Exception:
                log.exception("k8s-on-slurm %s: %s failed", self.name, what)

        task = asyncio.create_task(run(), name=f"{self.name}-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _take_jobsets(self, jobs: Collection[BackendJob], complete: bool) -> None:
        if complete:
            self._k8s_synced = True
        for bj in jobs:
            if "/" not in bj.backend_id:
                continue
            if self._view(bj.backend_id) is None and bj.job_uid not in self._pairs:
                continue  # another back end's JobSet
            self._pairs.setdefault(bj.job_uid, _Pair(bj.backend_id)).jobset_id = bj.backend_id

    async def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
        """Both worlds merged (see the module docstring): after every Slurm snapshot a
        complete batch of every pool job; after every JobSet change, that job."""
        queue: asyncio.Queue[tuple[str, StatusBatch]] = asyncio.Queue()

        async def follow(what: str, stream: AsyncIterator[StatusBatch]) -> None:
            async for batch in stream:
                queue.put_nowait((what, batch))

        tasks = [asyncio.create_task(follow("slurm", self.slurm.watch(interval)),
                                     name=f"{self.name}-watch-slurm"),
                 asyncio.create_task(follow("k8s", self.k8s.watch(interval)),
                                     name=f"{self.name}-watch-k8s"),
                 asyncio.create_task(self.node_states.run(), name=f"{self.name}-node-states")]
        try:
            while True:
                what, batch = await queue.get()
                if what == "k8s":
                    self._take_jobsets(batch.jobs, batch.complete)
                    uids = [bj.job_uid for bj in batch.jobs if bj.job_uid in self._pairs]
                    jobs = [j for u in dict.fromkeys(uids) if (j := self._compose(u))]
                    if jobs:
                        yield StatusBatch(tuple(jobs), complete=False, at=batch.at)
                    continue
                self._take_holders(batch.jobs)
                jobs = [j for u in list(self._pairs) if (j := self._compose(u))]
                yield StatusBatch(tuple(jobs), complete=self._k8s_synced, at=batch.at)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- capacity and output -------------------------------------------------------------

    async def inventory(self) -> Inventory:
        """Slurm's nodes and switches: Slurm allocates."""
        return await self.slurm.inventory()

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        """The pods' log (:meth:`KubernetesBackend.read_log`)."""
        jobset_id, _ = split_pool_id(job.backend_id)
        return await self.k8s.read_log(replace(job, backend_id=jobset_id), stream, offset)


def create(name: str, settings: Mapping[str, Any]) -> PoolBackend:
    """Entry point ``hpc_bridge.backends: k8s-on-slurm`` (settings:
    :class:`pool_adapter.settings.PoolSettings`; errors name ``backends.NAME.KEY``)."""
    s = parse_settings(PoolSettings, f"backends.{name}", settings)
    try:
        nodes = NodeMap.parse(s.node_map, s.node_table)
    except ValueError as exc:
        raise ValueError(f"backends.{name}.node_map: {exc}") from None
    slurm = slurm_backend.create(f"{name}.slurm", s.slurm)
    k8s = k8s_backend.create(f"{name}.kubernetes", s.kubernetes)
    return PoolBackend(name, slurm, k8s, nodes, s.taint_key, s.pool_label,
                       s.node_state_interval)

