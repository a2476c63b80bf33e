"""TrainJob CRs as a front door: ``kubectl apply`` a TrainJob, the bridge runs it.

The door watches ``trainer.kubeflow.org/v1alpha1`` TrainJobs in all namespaces (one
list-then-watch, resumed after restarts of either side) and takes those whose
``spec.managedBy`` is one of its ``managed_by`` values (default
``hpc-bridge.io/controller``), so a Kubeflow Trainer controller in the same cluster
leaves them alone and the bridge leaves Trainer's alone.

For each of its TrainJobs:

1. It adds the finalizer ``hpc-bridge.io/finalizer`` *before* admitting, so a delete
   can never get ahead of the cancel.
2. It admits the job into the engine (origin ``kubernetes``, the CR's uid as the job's
   uid: a restarted bridge finds the job it already has and admits nothing twice).
   The back end is the door's ``backend`` setting, or the ``hpc-bridge.io/backend``
   annotation when it names one of ``allowed_backends``. The job runs as the Unix user
   ``namespace_users[namespace]`` or ``run_as`` (Slurm needs one).
3. A TrainJob the bridge refuses (bad field, unknown runtime, numNodes 0, no image for
   Kubernetes, a back end not allowed) gets ``Failed=True`` with the message; it is
   not retried until its spec changes (``metadata.generation``).
4. ``spec.suspend`` changes suspend or resume the job.
5. Deleting the TrainJob cancels the job wherever it runs; the finalizer is removed
   once the job is finished (for Kubernetes the JobSet and its pods are gone).
6. Status is written back (``/status`` subresource, merge patch) whenever the job
   changes (:mod:`k8s_adapter.status`), driven by the service's change feed: see
   :meth:`TrainJobFrontDoor._status_loop` (k8s_adapter/door_status.py).
7. A TrainJob Kueue queues gets the bridge's topology request in Kueue's terms when it
   is created, from the door's webhook (:mod:`k8s_adapter.door_topology`).
8. Each change of the job's state or reason is recorded as a Kubernetes Event on the
   TrainJob (:mod:`k8s_adapter.trainjob_events`), once, and no job floods the
   apiserver (:mod:`k8s_adapter.event_recorder`). The event is recorded before the
   status that goes with it, so a reader who sees a condition finds its event.

A door whose ``managed_by`` names Trainer's own value
(``trainer.kubeflow.org/trainjob-controller``: every TrainJob the Kubeflow SDK's
``train()`` makes) is a drop-in for Trainer's controller: it refuses to start while a
Trainer controller is installed (:mod:`k8s_adapter.dropin`), and stops when one is
installed later, logging the reason; the rest of the daemon serves on.

The door reaches jobs only through :class:`bridge.service.JobService`.

Settings (``[frontdoors.NAME]``, ``kind = "kubernetes"``): ``kubeconfig``, ``context``,
``managed_by`` (list), ``backend``, ``allowed_backends`` (list), ``run_as``,
``namespace_users`` (table), ``status_interval`` (seconds), ``namespaces`` (list to
watch; default all), ``webhook_listen``/``webhook_tls_cert``/``webhook_tls_key`` (the
topology webhook: k8s_adapter/door_topology.py).
"""

from __future__ import annotations

import asyncio
import pwd
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from bridge.backend import BackendRejected, BackendUnavailable, Owner
from bridge.backoff import Backoff
from bridge.model import ANN_BACKEND, ANN_FRONTDOOR, MANAGED_BY, ValidationError, load_trainjob
from bridge.model import GROUP as TRAINER_GROUP
from bridge.model import VERSION as TRAINER_VERSION
from bridge.plugin_settings import parse_settings
from bridge.service import EngineError, JobRecord
from bridge.states import LIVE
from k8s_adapter.access import ANN_ORIGIN, ORIGIN_KUBERNETES
from k8s_adapter.door_status import ORIGIN, StatusWriteBack
from k8s_adapter.door_topology import DoorTopology
from k8s_adapter.dropin import (
    TRAINER_MANAGED_BY,
    TrainerInstalled,
    check_no_trainer,
    watch_for_trainer,
)
from k8s_adapter.event_recorder import EventRecorder
from k8s_adapter.kube import Kube, KubeSettings
from k8s_adapter.kueue_workloads import KueueWorkloads
from k8s_adapter.runtime_source import ClusterRuntimes
from k8s_adapter.settings import TrainJobDoorSettings
from k8s_adapter.status import failed_status, same_status
from k8s_adapter.trainjobs import ANN_REFUSED, FINALIZER, PLURAL, TrainJobCalls
from k8s_adapter.trainjobs import document as _document
from k8s_adapter.trainjobs import finished as _finished
from k8s_adapter.trainjobs import ref as _ref

if TYPE_CHECKING:

    from bridge.service import JobService

__all__ = ["FINALIZER", "TrainJobFrontDoor", "create"]

log = structlog.get_logger(__name__)

ROOT = Owner(uid=0, gid=0, user="root")
#: Seconds before a TrainJob whose handling failed is handled again.
RETRY_SECONDS = 2.0
#: TrainJobs handled at once (their finalizer and status calls overlap).
HANDLE_CONCURRENCY = 16


@dataclass(frozen=True)
class FrontDoorSettings:
    kube: KubeSettings
    managed_by: tuple[str, ...] = (MANAGED_BY,)
    #: Back end of a TrainJob that names none (None: the engine's default).
    backend: str | None = None
    #: Back ends the ``hpc-bridge.io/backend`` annotation may choose (empty: only
    #: ``backend``).
    allowed_backends: tuple[str, ...] = ()
    run_as: str = "nobody"
    namespace_users: Mapping[str, str] = field(default_factory=dict)
    status_interval: float = 0.5
    #: Namespaces to watch (empty: all; then the bridge needs cluster-wide RBAC).
    namespaces: tuple[str, ...] = ()
    #: The topology webhook (k8s_adapter/topology_webhook.py): ``HOST:PORT`` (empty:
    #: none), its certificate and key files.
    webhook_listen: str = ""
    webhook_tls: tuple[str, str] = ("", "")


class TrainJobFrontDoor(StatusWriteBack):
    """See the module docstring."""

    def __init__(self, name: str, settings: FrontDoorSettings):
        self.name = name
        self.settings = settings
        self.kube = Kube(settings.kube)
        self.calls = TrainJobCalls(self.kube)
        #: uid -> the last TrainJob object seen (ours only).
        self._objects: dict[str, dict[str, Any]] = {}
        #: uid -> the status last written (or read), to write only changes.
        self._written: dict[str, dict[str, Any]] = {}
        self._dirty: set[str] = set()
        #: uid -> when to handle the TrainJob again (its last handling failed).
        self._retry: dict[str, float] = {}
        #: uid -> the newest event not handled yet; uid -> the task handling its events.
        self._latest: dict[str, tuple[dict[str, Any], bool]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        #: uid -> the ``metadata.generation`` whose spec was handled (admitted, suspend
        #: followed): later events of that generation are echoes of status writes.
        self._handled: dict[str, Any] = {}
        #: The cluster's training runtimes (k8s_adapter/runtime_source.py).
        self.runtimes = ClusterRuntimes(self.kube, name, self.settings.namespaces or (None,))
        #: Why Kueue holds a TrainJob (k8s_adapter/kueue_workloads.py).
        self.kueue = KueueWorkloads(self.kube, self._jobs_status_changed,
                                    settings.namespaces or (None,))
        #: When to record an Event for a job (k8s_adapter/event_recorder.py).
        self.events = EventRecorder(f"{name}@{socket.gethostname()}")
        #: Kueue's topology request (k8s_adapter/door_topology.py).
        self.topology = DoorTopology(name, settings, self._ours,
                                     lambda: self.runtimes.synced.is_set())
        self._slots = asyncio.Semaphore(HANDLE_CONCURRENCY)
        self._wake = asyncio.Event()
        self._service: JobService | None = None

    # -- life cycle ------------------------------------------------------------------

    async def run(self, service: JobService) -> None:
        self._service = service
        webhook = await self.topology.serve(service)  # first: the apiserver may call it
        try:
            await self._run(service)
        finally:
            if webhook is not None:
                await webhook.cleanup()

    async def _run(self, service: JobService) -> None:
        backoff = Backoff(1.0, 30.0)
        namespaces = self.settings.namespaces or (None,)
        runtimes = self.runtimes
        runtimes.apply = partial(service.set_runtimes, self.name)
        while True:
            try:
                await self.kube.connect()
                if TRAINER_MANAGED_BY in self.settings.managed_by:
                    await check_no_trainer(self.kube, self.name)
                kinds = await runtimes.probe()
                break
            except TrainerInstalled as exc:
                log.error("TrainJob front door %s refused to start: %s", self.name, exc)
                return
            except (BackendUnavailable, BackendRejected) as exc:
                log.warning("TrainJob front door %s waits for Kubernetes: %s", self.name, exc)
                await backoff.sleep()
        # The cluster's runtimes first: no TrainJob is refused for want of one.
        watchers = [asyncio.create_task(runtimes.run(kinds), name=f"{self.name}-runtimes")]
        synced = asyncio.create_task(runtimes.synced.wait())
        await asyncio.wait([watchers[0], synced], return_when=asyncio.FIRST_COMPLETED)
        synced.cancel()
        writer = asyncio.create_task(self._status_loop(), name=f"{self.name}-status")
        watchers += [asyncio.create_task(self._watch(ns), name=f"{self.name}-watch-{ns or 'all'}")
                     for ns in namespaces]
        watchers.append(asyncio.create_task(self.kueue.run(), name=f"{self.name}-kueue"))
        if TRAINER_MANAGED_BY in self.settings.managed_by:
            watchers.append(asyncio.create_task(self._guard_drop_in(),
                                                name=f"{self.name}-drop-in"))
        try:
            done, _ = await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a watcher's failure ends the door, as before
        finally:
            tasks = [*watchers, writer, *self._workers.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _guard_drop_in(self) -> None:
        """Return (ending the door) once a Trainer controller is installed beside this
        drop-in door (k8s_adapter/dropin.py)."""
        exc = await watch_for_trainer(self.kube, self.name)
        log.error("TrainJob front door %s stops: %s", self.name, exc)

    async def _watch(self, namespace: str | None) -> None:
        """Follow the TrainJobs of one namespace (None: all)."""
        if namespace is None:
            stream = self.kube.list_watch(
                "TrainJobs", self.kube.custom.list_cluster_custom_object, TRAINER_GROUP,
                TRAINER_VERSION, PLURAL)
        else:
            stream = self.kube.list_watch(
                f"TrainJobs in {namespace}", self.kube.custom.list_namespaced_custom_object,
                TRAINER_GROUP, TRAINER_VERSION, namespace, PLURAL)
        async for kind, payload in stream:
            items = payload if kind == "SYNC" else [payload]
            if kind == "SYNC":
                seen = {str((o.get("metadata") or {}).get("uid")) for o in items}
                for gone in [u for u, o in self._objects.items() if u not in seen and (
                        namespace is None
                        or (o.get("metadata") or {}).get("namespace") == namespace)]:
                    self._objects.pop(gone, None)
            if kind == "SYNC":
                self._cancel_orphans(namespace, {str((o.get("metadata") or {}).get("uid"))
                                                 for o in items})
            for obj in items:
                self._enqueue(obj, deleted=kind == "DELETED")

    def _enqueue(self, obj: dict[str, Any], deleted: bool) -> None:
        """Handle ``obj`` soon: TrainJobs are handled concurrently (their API calls
        overlap, at most ``HANDLE_CONCURRENCY`` at once), one TrainJob's events in
        order, a burst of them for one TrainJob coalesced into its latest."""
        uid = str((obj.get("metadata") or {}).get("uid"))
        self._latest[uid] = (obj, deleted)
        if uid not in self._workers:
            self._workers[uid] = asyncio.create_task(self._work(uid), name=f"trainjob-{uid}")

    async def _work(self, uid: str) -> None:
        try:
            while uid in self._latest:
                obj, deleted = self._latest.pop(uid)
                async with self._slots:
                    try:
                        await self._handle(obj, deleted=deleted)
                    except (BackendUnavailable, BackendRejected) as exc:
                        log.warning("TrainJob %s: %s (will retry)", _ref(obj), exc)
                        self._retry[uid] = time.monotonic() + RETRY_SECONDS
                    except Exception:
                        log.exception("TrainJob %s: handling failed", _ref(obj))
                self._wake.set()
        finally:
            self._workers.pop(uid, None)

    async def close(self) -> None:
        await self.kube.close()

    def _cancel_orphans(self, namespace: str | None, listed: set[str]) -> None:
        """Cancel unfinished jobs whose TrainJob is gone from a full listing (deleted
        while the bridge was away, with its finalizer removed by hand)."""
        assert self._service is not None
        for rec in self._service.list_jobs(list(LIVE), origin=ORIGIN).items:
            if rec.uid in listed or rec.cancel_requested or (
                    namespace is not None and rec.namespace != namespace):
                continue
            log.warning("TrainJob %s/%s is gone: cancelling job %d", rec.namespace, rec.name,
                        rec.id)
            try:
                self._service.cancel(rec, ROOT)
            except EngineError as exc:
                log.warning("job %d: %s", rec.id, exc)

    # -- one TrainJob ----------------------------------------------------------------

    def _ours(self, obj: Mapping[str, Any]) -> bool:
        spec = obj.get("spec")
        return isinstance(spec, Mapping) and spec.get("managedBy") in self.settings.managed_by

    async def _handle(self, obj: dict[str, Any], deleted: bool) -> None:
        assert self._service is not None
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        if not self._ours(obj):
            return
        if deleted:
            self._objects.pop(uid, None)
            self._written.pop(uid, None)
            self._handled.pop(uid, None)
            self.events.forget(uid)
            rec = self._service.get_by_uid(uid)
            if rec is not None and not rec.state.terminal and not rec.cancel_requested:
                # Deleted without our finalizer (removed by hand): still stop the job.
                self._service.cancel(rec, ROOT)
            return
        self._objects[uid] = obj
        written = self._written.get(uid)
        if written is None or not same_status(obj.get("status"), written):
            self._dirty.add(uid)  # not the echo of the door's own status write
        generation = meta.get("generation")
        if (not meta.get("deletionTimestamp") and generation is not None
                and self._handled.get(uid) == generation):
            return  # a status or metadata echo (our own writes): the spec is as handled
        rec = self._service.get_by_uid(uid)
        if meta.get("deletionTimestamp"):
            await self._deleting(obj, rec)
            return
        if rec is None:
            if _finished(obj) and ANN_REFUSED not in (meta.get("annotations") or {}):
                # Finished before this store knew it (a new leader rebuilds its store
                # from the CRs): done, never run again. A later delete only needs the
                # finalizer removed (_deleting with no record). A refused one goes on
                # to _admit, which admits it again once its spec has changed.
                self._handled[uid] = generation
                return
            if await self._admit(obj):
                self._handled[uid] = generation
            return
        want = bool((obj.get("spec") or {}).get("suspend"))
        if not rec.state.terminal and want != rec.suspend_requested:
            try:
                self._service.set_suspend(rec, want, ROOT)
                log.info("TrainJob %s %s", _ref(obj), "suspended" if want else "resumed")
            except EngineError as exc:
                log.warning("TrainJob %s: %s", _ref(obj), exc)
        self._handled[uid] = generation

    async def _deleting(self, obj: dict[str, Any], rec: JobRecord | None) -> None:
        assert self._service is not None
        if rec is not None and not rec.state.terminal:
            if not rec.cancel_requested:
                try:
                    self._service.cancel(rec, ROOT)
                    log.info("TrainJob %s deleted: cancelling job %d", _ref(obj), rec.id)
                except EngineError as exc:
                    log.warning("TrainJob %s: %s", _ref(obj), exc)
            rec = self._service.get(rec.id)
            if not rec.state.terminal:
                return  # the status loop removes the finalizer once it is finished
        await self.calls.remove_finalizer(obj)

    def _owner(self, namespace: str) -> Owner:
        user = self.settings.namespace_users.get(namespace, self.settings.run_as)
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise ValidationError([("", f"namespace {namespace!r} maps to Unix user "
                                        f"{user!r}, which does not exist here")]) from None
        return Owner(uid=pw.pw_uid, gid=pw.pw_gid, user=user)

    async def _admit(self, obj: dict[str, Any]) -> bool:
        """Admit the TrainJob, or refuse it with a Failed condition (True: this
        generation is dealt with; API errors propagate, to be retried)."""
        assert self._service is not None
        meta = obj.get("metadata") or {}
        # The finalizer goes on before a job is admitted, so before any submit: a
        # TrainJob that has it but no record here was taken by a bridge before (a
        # leader that went away, a lost store), and its job may exist in the back end.
        # So much hangs on it that it is read fresh: a watch event can be older than
        # this door's own writes (one that came while it refused this TrainJob and
        # removed the finalizer, e.g. Kueue's edit of the spec).
        if FINALIZER in (meta.get("finalizers") or []):
            latest = await self.calls.get(obj)
            if latest is None or (latest.get("metadata") or {}).get("deletionTimestamp"):
                return True  # gone or going (replaced, maybe): its delete events end it
            obj, meta = latest, latest.get("metadata") or {}
        generation = str(meta.get("generation") or "")
        if (meta.get("annotations") or {}).get(ANN_REFUSED) == generation and generation:
            return True  # refused before and unchanged since
        taken_before = FINALIZER in (meta.get("finalizers") or [])
        if not taken_before:
            obj = await self.calls.add_finalizer(obj)
            meta = obj.get("metadata") or {}
        try:
            job = load_trainjob(_document(obj), f"TrainJob {_ref(obj)}")
            annotations = job.metadata.annotations
            chosen = annotations.get(ANN_BACKEND)
            allowed = set(self.settings.allowed_backends)
            if self.settings.backend:
                allowed.add(self.settings.backend)
            if chosen is not None and chosen not in allowed:
                raise ValidationError([(f"metadata.annotations[{ANN_BACKEND}]",
                                        f"back end {chosen!r} is not allowed for TrainJobs; "
                                        f"allowed: {', '.join(sorted(allowed)) or '(none)'}")])
            if chosen is None and self.settings.backend:
                annotations[ANN_BACKEND] = self.settings.backend
            annotations[ANN_ORIGIN] = ORIGIN_KUBERNETES
            annotations[ANN_FRONTDOOR] = self.name  # its cluster's runtimes are the job's
            # Taken before: the engine looks it up (adopts it) before any submit.
            owner = self._owner(str(meta.get("namespace")))
            try:
                rec = self._service.admit(job, owner, origin=ORIGIN,
                                          taken_before=taken_before).record
            except ValidationError as exc:
                if not await self.runtimes.came_since(exc, job):
                    raise
                rec = self._service.admit(job, owner, origin=ORIGIN,
                                          taken_before=taken_before).record
        except (ValidationError, EngineError) as exc:
            await self._refuse(obj, str(exc))
            return True
        log.info("TrainJob %s admitted as job %d on %s", _ref(obj), rec.id, rec.backend)
        return True

    async def _refuse(self, obj: dict[str, Any], message: str) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        log.warning("TrainJob %s refused: %s", _ref(obj), message)
        status = failed_status(message, "InvalidTrainJob", obj.get("status"))
        await self.calls.patch_status(obj, status)
        self._written[uid] = status
        # Remember the refusal on the object (survives a restart), and let it go.
        await self.calls.mark_refused(obj)
        await self.calls.remove_finalizer(obj)

    # -- status write-back (k8s_adapter/door_status.py) ---------------------------

    async def _retry_due(self) -> None:
        """Handle again the TrainJobs whose last handling failed (apiserver down,
        a conflict): their next watch event may be long in coming."""
        now = time.monotonic()
        self._dirty.update(self.events.due())  # a held-back reason, now allowed
        for uid, at in list(self._retry.items()):
            if at > now:
                continue
            del self._retry[uid]
            obj = self._objects.get(uid)
            if obj is not None and uid not in self._latest:
                self._enqueue(obj, deleted=False)


KNOWN_SETTINGS = frozenset(TrainJobDoorSettings.model_fields)


def create(name: str, settings: Mapping[str, Any]) -> TrainJobFrontDoor:
    """Entry point ``hpc_bridge.frontdoors: kubernetes``: settings as
    :class:`k8s_adapter.settings.TrainJobDoorSettings`; ValueError naming
    ``frontdoors.NAME.KEY`` for an unknown or malformed setting."""
    s = parse_settings(TrainJobDoorSettings, f"frontdoors.{name}", settings)
    return TrainJobFrontDoor(name, FrontDoorSettings(
        kube=s.kube(), managed_by=s.managed_by or (MANAGED_BY,), backend=s.backend,
        allowed_backends=s.allowed_backends, run_as=s.run_as,
        namespace_users=dict(s.namespace_users), status_interval=s.status_interval,
        namespaces=s.namespaces, webhook_listen=s.webhook_listen,
        webhook_tls=(s.webhook_tls_cert, s.webhook_tls_key)))
