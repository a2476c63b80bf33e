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
* An allocation's end takes its node labels and the unfinished pods that select them
  (:meth:`pool_adapter.binding.Binder.unlabel`); labels of Slurm jobs no longer alive
  and pods pinned to labels their node lost (a crash, a failed call) go after
  ``ORPHAN_GRACE`` seconds (:mod:`pool_adapter.sweeper`).
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
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import structlog

from bridge.backend import (
    BackendError,
    BackendJob,
    BackendRejected,
    BackendState,
    Inventory,
    Owner,
    StatusBatch,
    SubmitRequest,
)
from bridge.model import TrainJob
from bridge.plugin_settings import parse_settings
from bridge.runtimes import LaunchPlan
from k8s_adapter import backend as k8s_backend
from pool_adapter import pinning
from pool_adapter.binding import Binder
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
from pool_adapter.pairs import Pair, Pairs
from pool_adapter.settings import PoolSettings
from pool_adapter.sweeper import AllocationSweeper
from slurm_adapter import backend as slurm_backend

log = structlog.get_logger(__name__)

#: Seconds before an action whose effect has not shown yet is tried again.
RETRY_SECONDS = 5.0
#: Seconds a holder of this back end must be seen without its JobSet before it is
#: cancelled as an orphan (a JobSet just created may not have reached the watch yet).
ORPHAN_GRACE = 10.0
#: A new holder is looked at every FOLLOW_EVERY s for FOLLOW_SECONDS (_follow_start).
FOLLOW_EVERY = 0.2
FOLLOW_SECONDS = 5.0
#: At most this many orphan holders are being cancelled at once.
ORPHAN_CANCELS_AT_ONCE = 4
#: Bound of the remembered ended holders.
MEMORY = 10_000


def split_pool_id(backend_id: str) -> tuple[str, str | None]:
    """``namespace/name@slurmid`` → (``namespace/name``, slurm id or None)."""
    jobset, sep, holder = backend_id.partition("@")
    if "/" not in jobset or (sep and not (holder.isascii() and holder.isdigit())):
        raise BackendRejected(f"not a k8s-on-slurm id (namespace/name@slurmid): "
                              f"{backend_id!r}")
    return jobset, holder or None


def owner_of(uid: int) -> Owner:
    """The Unix account of ``uid`` (a holder's owner, for acting on it as them); a
    blocking lookup (NSS): call it in a worker thread. KeyError when there is none."""
    entry = pwd.getpwuid(uid)
    return Owner(uid=uid, gid=entry.pw_gid, user=entry.pw_name)


class PoolBackend:
    """:class:`bridge.backend.Backend` over a Slurm and a Kubernetes back end."""

    #: One pod per node: a TrainJob node is a whole allocated Slurm node.
    packs_units = False
    runs_pods = True
    option_support = SUPPORT
    #: Not yet: the cache's pods would need their own allocation (docs/data-cache.md).
    runs_data_cache = False
    #: The holder job goes to Slurm with ``--begin``: Slurm reads it, not the bridge.
    native_begin = True

    def __init__(self, name: str, slurm: slurm_backend.SlurmBackend,
                 k8s: k8s_backend.KubernetesBackend, nodes: NodeMap, taint_key: str,
                 pool_label: str | None, node_state_interval: float = 30.0,
                 partition: str | None = None):
        self.name = name
        self.slurm = slurm
        self.k8s = k8s
        self.partition = partition
        k8s.amend = partial(pinning.amend, pool=name, taint_key=taint_key,
                            pool_label=pool_label)
        self.binder = Binder(k8s, nodes)
        self.node_states = NodeStates(name, slurm, k8s, nodes, pool_label,
                                      node_state_interval)
        self.binder.scope = lambda: self.node_states.pool_nodes
        self.pairs = Pairs(name, f"{HOLDER_COMMENT}:{name} ")
        self._k8s_synced = False
        self._slurm_synced = False
        #: (JobSet id, action, holder id) -> when it was last started.
        self._acted: dict[tuple[str, Do, str], float] = {}
        #: JobSet ids with an action in flight (one at a time per job).
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Slurm ids whose node labels were removed after they ended (bounded).
        self._unlabelled: set[str] = set()
        #: Holders of this back end without a JobSet: Slurm id -> when first seen so.
        self._orphans: dict[str, float] = {}
        self._orphan_slots = asyncio.Semaphore(ORPHAN_CANCELS_AT_ONCE)
        self._orphans_busy: set[str] = set()
        #: Labels and pinned pods that outlived their allocation (pool_adapter/sweeper).
        self._sweeper = AllocationSweeper(name, slurm, k8s, self.binder, self.node_states,
                                          self._spawn, ORPHAN_GRACE)
        #: The merged status stream while :meth:`watch` runs.
        self._queue: asyncio.Queue[tuple[str, StatusBatch]] | None = None

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Both worlds answer; ``scancel`` is on the daemon's host (a holder is ended
        by a signal to its batch shell)."""
        if not self.slurm.cli.has("scancel"):
            raise BackendRejected(f"back end {self.name}: k8s-on-slurm needs scancel on the "
                                  "daemon's host (holders are ended by signals)")
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
        """The JobSet renders (with the pool's changes); a partition other than the
        pool's is refused (its nodes would not be the pool's)."""
        asked = request.options.partition
        if self.partition and asked and asked != self.partition:
            raise BackendRejected(f"--partition={asked}: back end {self.name} allocates in "
                                  f"partition {self.partition} (the shared pool's nodes)")
        self.k8s.validate(replace(request, placement=None))

    # -- jobs ---------------------------------------------------------------------------

    def _holder_request(self, request: SubmitRequest, jobset_id: str) -> SubmitRequest:
        """The job's request as a holder: its shape and Slurm options, the whole nodes
        (``--exclusive``: the pods use what kubelet gives them, not what Slurm counted),
        the pool's partition, no output file (the holder prints nothing), its comment
        naming the JobSet. No node list: the placement's prediction is recorded by the
        engine; Slurm decides."""
        options = request.options.model_copy(update={
            "output": "/dev/null", "error": None, "exclusive": True,
            "partition": self.partition or request.options.partition,
            "comment": self.pairs.note_of(jobset_id)})
        return replace(request, options=options, placement=None)

    async def submit(self, request: SubmitRequest) -> str:
        """See the module docstring: the JobSet, then the holder (one per job). A holder
        Slurm refuses takes the JobSet with it (nothing waits for an allocation that
        will never come)."""
        jobset_id = await self.k8s.submit(replace(request, placement=None))
        note = self.pairs.note_of(jobset_id)
        holders = [h for h in await self.slurm.lookup([request.job_uid])
                   if h.owner_uid == request.owner.uid and h.note == note
                   and not h.state.finished]
        if holders:
            holder_id = holders[0].backend_id
            log.info("job %s: holder Slurm job %s already exists; adopted",
                     request.job_uid, holder_id)
            return f"{jobset_id}@{holder_id}"
        try:
            script = holder_script(jobset_id, request.job_uid)
            holder_id = await self.slurm.submit(self._holder_request(request, jobset_id),
                                                script)
        except (BackendRejected, ValueError) as exc:
            await self.binder.delete(jobset_id)
            raise BackendRejected(str(exc)) from None
        self._spawn(f"follow-{holder_id}", self._follow_start(request.job_uid))
        return f"{jobset_id}@{holder_id}"

    def _view_of(self, pair: Pair) -> JobSetView | None:
        """The pair's JobSet as the watch last saw it (None: gone)."""
        namespace, _, name = pair.jobset_id.partition("/")
        obj = self.k8s.jobset_object(namespace, name)
        bj = self.k8s.state_of(obj) if obj is not None else None
        if obj is None or bj is None:
            return None
        pinned = pinning.pinned_to(obj)
        if pinned is not None and pair.holder is not None \
                and pair.holder.backend_id == pinned and pair.holder.nodes:
            if pair.pinned_nodes is None:  # pinned before a restart: to these nodes
                pair.pinned_nodes = pair.holder.nodes
            elif pair.pinned_nodes != pair.holder.nodes:
                pinned = None  # requeued onto other nodes under the same id: pin again
        return JobSetView(bj, bool((obj.get("spec") or {}).get("suspend")), pinned)

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        """Each of these jobs whose JobSet (this back end's) and holder (naming it,
        its recorded owner's) both exist, composed. A JobSet without a holder is not
        reported: the engine submits again, which adopts the JobSet and makes the
        holder."""
        holders = await self.slurm.lookup(job_uids)
        found: list[BackendJob] = []
        for obj, js in await self.k8s.jobsets_of(job_uids):
            pairs = Pairs(self.name, self.pairs.note_prefix)
            pair = pairs.take_jobset(js.backend_id, obj, time.monotonic())
            if pair is None:
                continue
            pairs.take_holders(holders, complete=True)
            if pair.holder is None:
                continue
            view = JobSetView(js, bool((obj.get("spec") or {}).get("suspend")),
                              pinning.pinned_to(obj))
            composed = compose(f"{js.backend_id}@{pair.holder.backend_id}", pair.holder,
                               view, True)
            if composed.job is not None:
                found.append(composed.job)
        return found

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        """Delete the JobSet, cancel the holder (both: a missing one is no error)."""
        jobset_id, holder_id = split_pool_id(backend_id)
        await self.binder.delete(jobset_id)
        if holder_id is not None:
            await self.slurm.cancel(holder_id, owner)

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        """Suspend: the holder is held (requeued if it runs: it leaves its nodes); the
        watch then suspends and unpins the JobSet. Resume: the holder is released; the
        watch pins the JobSet again once Slurm starts it."""
        _, holder_id = split_pool_id(backend_id)
        if holder_id is None:
            raise BackendRejected(f"{backend_id}: no Slurm job to suspend")
        await self.slurm.set_suspended(holder_id, suspend, owner)

    def jobs_status(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        return self.k8s.jobs_status(namespace, job_uid)

    def on_jobs_status(self, listener: Callable[[str], None]) -> Callable[[], None]:
        return self.k8s.on_jobs_status(listener)

    # -- keeping the worlds in line ------------------------------------------------------

    async def _act(self, pair: Pair, holder: BackendJob | None, composed: Composed) -> None:
        """Do ``composed.action`` for ``holder`` (the holder :func:`compose` saw; None:
        none, only an unpin)."""
        namespace, _, name = pair.jobset_id.partition("/")
        obj = self.k8s.jobset_object(namespace, name)
        action = composed.action
        if holder is None:
            if action is Do.UNPIN and obj is not None:
                await self.binder.unpin(obj)
                # Only a holder once verified as this job's: the JobSet's own selector
                # is its namespace user's to write (it may name someone else's).
                if pair.holder_id is not None and pinning.pinned_to(obj) == pair.holder_id:
                    await self.binder.unlabel(pair.holder_id)
            return
        if action is Do.PIN and obj is not None:
            await self.binder.pin(obj, holder)
            pair.pinned_nodes = holder.nodes
            log.info("JobSet %s pinned to Slurm job %s on %s", pair.jobset_id,
                     holder.backend_id, ",".join(holder.nodes))
        elif action is Do.UNPIN:
            if obj is not None:
                await self.binder.unpin(obj)
            pair.pinned_nodes = None
            await self.binder.unlabel(holder.backend_id)
        elif action is Do.DELETE_JOBSET:
            await self.binder.delete(pair.jobset_id)
        elif action in (Do.END_HOLDER, Do.CANCEL_HOLDER):
            owner = await asyncio.to_thread(owner_of, pair.owner_uid)
            if action is Do.END_HOLDER:
                assert composed.signal is not None
                await self.slurm.signal(holder.backend_id, composed.signal, owner)
            else:
                await self.slurm.cancel(holder.backend_id, owner)

    def _start_action(self, pair: Pair, composed: Composed) -> None:
        """Start the action unless one runs for this job, or this one was started less
        than ``RETRY_SECONDS`` ago (its effect not shown yet)."""
        holder = pair.holder
        if composed.action is Do.NOTHING or pair.jobset_id in self._busy:
            return
        key = (pair.jobset_id, composed.action, holder.backend_id if holder else "")
        now = time.monotonic()
        if now - self._acted.get(key, -RETRY_SECONDS) < RETRY_SECONDS:
            return
        self._acted[key] = now
        self._busy.add(pair.jobset_id)

        async def run() -> None:
            try:
                await self._act(pair, holder, composed)
            finally:
                self._busy.discard(pair.jobset_id)

        self._spawn(f"{composed.action.value}-{pair.jobset_id}", run())

    def _cleanup_labels(self, holder_id: str) -> None:
        """Once per ended holder (per daemon run): its nodes lose its label."""
        if holder_id in self._unlabelled:
            return
        if len(self._unlabelled) >= MEMORY:
            self._unlabelled.clear()
        self._unlabelled.add(holder_id)

        async def run() -> None:
            try:
                await self.binder.unlabel(holder_id)
            except BaseException:
                self._unlabelled.discard(holder_id)  # the next pass tries again
                raise

        self._spawn(f"unlabel-{holder_id}", run())

    def _compose(self, pair: Pair) -> BackendJob | None:
        """The job's state now, its action started."""
        view = self._view_of(pair)
        # A holder Slurm forgot before this process saw it (purged after MinJobAge
        # while the daemon was down): the one its JobSet was pinned to names the job.
        # The JobSet's selector is its namespace user's to write; the engine takes the
        # job only if that gives the id it recorded.
        holder_id = pair.holder.backend_id if pair.holder else (
            pair.holder_id or (view.pinned_to if view is not None else None))
        composed = compose(f"{pair.jobset_id}@{holder_id}" if holder_id else pair.jobset_id,
                           pair.holder, view, self._k8s_synced and self._slurm_synced)
        self._start_action(pair, composed)
        if pair.holder is not None and pair.holder.state.finished:
            self._cleanup_labels(pair.holder.backend_id)
        return composed.job

    def _forget(self) -> None:
        for pair in self.pairs.forget_done(time.monotonic()):
            for key in [k for k in self._acted if k[0] == pair.jobset_id]:
                del self._acted[key]

    # -- holders -------------------------------------------------------------------------

    async def _follow_start(self, job_uid: str) -> None:
        """Right after a holder is submitted, look at it more often than the status poll
        does (every ``FOLLOW_EVERY`` s, for at most ``FOLLOW_SECONDS``) until Slurm has
        started it: binding then waits for Slurm, not for the next poll. Each look is
        one reading of Slurm's job table, shared with whoever else asks meanwhile
        (:class:`slurm_adapter.job_table.JobTable`: readings in order, at most four a
        second); a holder that waits longer is left to the status poll."""
        deadline = time.monotonic() + FOLLOW_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(FOLLOW_EVERY)
            jobs = await self.slurm.lookup([job_uid])
            if self._queue is not None:
                self._queue.put_nowait(("holder", StatusBatch(tuple(jobs), complete=False,
                                                              at=time.time())))
            if any(h.state is not BackendState.PENDING for h in jobs):
                return

    def _sweep_orphans(self, jobs: Collection[BackendJob]) -> None:
        """Cancel this back end's holders whose JobSet is not there, as their owners,
        once they have been seen so for ``ORPHAN_GRACE`` seconds and the apiserver
        (not only the watch) says the JobSet is gone: no Slurm allocation is held for a
        job that is gone. At most ``ORPHAN_CANCELS_AT_ONCE`` cancels run at once."""
        if not self._k8s_synced:
            return
        now = time.monotonic()
        seen: set[str] = set()
        for holder, jobset_id in self.pairs.orphans(jobs):
            seen.add(holder.backend_id)
            first = self._orphans.setdefault(holder.backend_id, now)
            if now - first < ORPHAN_GRACE or holder.backend_id in self._orphans_busy:
                continue
            self._orphans[holder.backend_id] = now  # at most once per grace
            self._orphans_busy.add(holder.backend_id)  # one task per holder at a time
            self._spawn(f"orphan-{holder.backend_id}", self._cancel_orphan(holder, jobset_id))
        for gone in set(self._orphans) - seen:
            del self._orphans[gone]

    async def _cancel_orphan(self, holder: BackendJob, jobset_id: str) -> None:
        """Cancel one orphan (at most one task per holder at a time)."""
        try:
            async with self._orphan_slots:
                pair = self.pairs.by_jobset.get(jobset_id)
                unpaired = pair is not None and not self.pairs.is_holder_of(pair, holder)
                if not unpaired and "/" in jobset_id and await self.binder.exists(
                        jobset_id, self.name, holder.job_uid):
                    return  # the watch is behind
                assert holder.owner_uid is not None
                owner = await asyncio.to_thread(owner_of, holder.owner_uid)
                log.warning("k8s-on-slurm %s: Slurm job %s holds nodes for JobSet %s, which "
                            "is not its job's; cancelling it", self.name, holder.backend_id,
                            jobset_id)
                await self.slurm.cancel(holder.backend_id, owner)
        finally:
            self._orphans_busy.discard(holder.backend_id)

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

    # -- status ---------------------------------------------------------------------------

    def _batch(self, what: str, batch: StatusBatch) -> StatusBatch | None:
        """One batch of either world → the pool's batch (None: nothing to say)."""
        now = time.monotonic()
        if what == "k8s":
            if batch.complete:
                self._k8s_synced = True
                self.pairs.mark_gone_except({bj.backend_id for bj in batch.jobs}, now)
            touched: dict[str, Pair] = {}
            for bj in batch.jobs:
                if "/" not in bj.backend_id:
                    continue
                namespace, _, name = bj.backend_id.partition("/")
                pair = self.pairs.take_jobset(bj.backend_id,
                                              self.k8s.jobset_object(namespace, name), now)
                if pair is not None:
                    touched[pair.jobset_id] = pair
            jobs = [j for p in touched.values() if (j := self._compose(p))]
            self._forget()
            return StatusBatch(tuple(jobs), complete=False, at=batch.at) if jobs else None
        complete = what == "slurm"
        pairs = self.pairs.take_holders(batch.jobs, complete)
        if complete:
            self._slurm_synced = True
            self._sweep_orphans(batch.jobs)
            try:
                self._sweeper.on_snapshot(batch.jobs, now)
            except Exception:  # the safety net must not stop the pool's status
                log.exception("k8s-on-slurm %s: the allocation sweep failed", self.name)
            pairs = list(self.pairs.by_jobset.values())
        jobs = [j for p in pairs if (j := self._compose(p))]
        self._forget()
        if not complete:
            return StatusBatch(tuple(jobs), complete=False, at=batch.at) if jobs else None
        return StatusBatch(tuple(jobs), complete=self._k8s_synced, at=batch.at)

    async def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
        """Both worlds merged (see the module docstring): after every Slurm snapshot a
        complete batch of every pool job; after every JobSet change, that job; after a
        look at a new holder, its job. A batch that cannot be read is logged and
        skipped (the stream goes on). A stream or task of either world that ends (a
        bug: they do not) ends this one with its error, so that the engine starts the
        watch again rather than the pool going on with one world frozen."""
        queue: asyncio.Queue[tuple[str, StatusBatch]] = asyncio.Queue()
        self._queue = queue
        self._k8s_synced = self._slurm_synced = False  # until the new streams have listed
        ended: list[asyncio.Task[None]] = []

        def on_end(task: asyncio.Task[None]) -> None:
            ended.append(task)
            queue.put_nowait(("ended", StatusBatch((), complete=False, at=0.0)))

        async def follow(what: str, stream: AsyncIterator[StatusBatch]) -> None:
            async for batch in stream:
                queue.put_nowait((what, batch))

        tasks = [asyncio.create_task(follow("slurm", self.slurm.watch(interval)),
                                     name=f"{self.name}-watch-slurm"),
                 asyncio.create_task(follow("k8s", self.k8s.watch(interval)),
                                     name=f"{self.name}-watch-k8s"),
                 asyncio.create_task(self.node_states.run(), name=f"{self.name}-node-states")]
        for t in tasks:
            t.add_done_callback(on_end)
        try:
            while True:
                what, batch = await queue.get()
                if what == "ended":
                    dead = ended[0]
                    raise RuntimeError(f"{self.name}: {dead.get_name()} ended") from (
                        None if dead.cancelled() else dead.exception())
                try:
                    out = self._batch(what, batch)
                except Exception:
                    log.exception("k8s-on-slurm %s: a %s status batch was not read", self.name,
                                  what)
                    continue
                if out is not None:
                    yield out
        finally:
            self._queue = None
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
                       s.node_state_interval, s.partition)
