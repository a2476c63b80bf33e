"""The TrainJob CR door's logic (k8s_adapter/frontdoor.py) without an apiserver: its
pure helpers, admission through the JobService, and the status write-back driven by the
service's change feed. The door's TrainJob calls are a recorded fake here; against the
real apiserver: tests/integration/test_k8s_trainjobs.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import BackendUnavailable, Owner
from bridge.engine import Engine
from bridge.model import MANAGED_BY
from bridge.service import JobService
from bridge.shape import JobShape
from bridge.states import JobState
from k8s_adapter import event_recorder, frontdoor
from k8s_adapter.event_recorder import EVENT_BURST
from k8s_adapter.kube import KubeRejected, KubeSettings
from k8s_adapter.trainjobs import TrainJobCalls, finished, ref
from tests.unit.test_engine_placement import trainjob
from tests.unit.test_service import make_service

ROOT = Owner(uid=0, gid=0, user="root")


def uid(n: int) -> str:
    """The TrainJob uid number ``n`` (RFC 4122, as the apiserver makes them)."""
    return f"00000000-0000-4000-8000-{n:012d}"


def obj(job_uid: str, name: str = "train", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "team-a", "uid": job_uid, "generation": 1,
                         "resourceVersion": "1", **meta},
            "spec": {"managedBy": MANAGED_BY, "runtimeRef": {"name": "plain"},
                     "trainer": {"command": ["hostname"]}}}


class RecordedCalls:
    """The door's TrainJob calls, recorded; ``patched`` is set on each status write."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.patched = asyncio.Event()
        self.evented = asyncio.Event()
        self.fail_next_patch = False
        #: name -> the TrainJob of that name as the apiserver has it now, where a test
        #: says (else the copy asked about); None: none of that name.
        self.server: dict[str, dict[str, Any] | None] = {}

    async def get(self, o: Mapping[str, Any]) -> dict[str, Any] | None:
        """As TrainJobCalls.get: by name; another uid under it is not this one."""
        self.calls.append(("get", o["metadata"]["uid"], None))
        latest = self.server.get(o["metadata"]["name"], dict(o))
        if latest is None or latest["metadata"]["uid"] != o["metadata"]["uid"]:
            return None
        return latest

    async def add_finalizer(self, o: dict[str, Any], fresh: bool = False) -> dict[str, Any]:
        self.calls.append(("add_finalizer", o["metadata"]["uid"], None))
        return {**o, "metadata": {**o["metadata"], "finalizers": [frontdoor.FINALIZER]}}

    async def remove_finalizer(self, o: Mapping[str, Any]) -> None:
        self.calls.append(("remove_finalizer", o["metadata"]["uid"], None))

    async def mark_refused(self, o: Mapping[str, Any]) -> None:
        self.calls.append(("mark_refused", o["metadata"]["uid"], None))

    async def patch_status(self, o: Mapping[str, Any], status: dict[str, Any]) -> None:
        if self.fail_next_patch:
            self.fail_next_patch = False
            raise BackendUnavailable("apiserver down")
        self.calls.append(("patch_status", o["metadata"]["uid"], status))
        self.patched.set()

    async def record_event(self, body: dict[str, Any]) -> None:
        self.calls.append(("record_event", body["involvedObject"]["uid"], body))
        self.evented.set()

    def statuses(self, job_uid: str) -> list[dict[str, Any]]:
        return [s for c, u, s in self.calls if c == "patch_status" and u == job_uid]

    def events(self, job_uid: str) -> list[tuple[str, str, str]]:
        """(reason, type, message) of each event recorded on ``job_uid``."""
        return [(b["reason"], b["type"], b["message"]) for c, u, b in self.calls
                if c == "record_event" and u == job_uid]


def last_condition(status: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The newest condition (the State column), None without any (Trainer's waiting or
    running job)."""
    if not status["conditions"]:
        return None
    cond = status["conditions"][-1]
    return cond["type"], cond["status"], cond["reason"]


def node_counts(status: Mapping[str, Any]) -> tuple[int, int]:
    """(active, ready) of the one ``node`` entry of a batch job's jobsStatus."""
    [entry] = status["jobsStatus"]
    return entry["active"], entry["ready"]


@dataclass
class Bed:
    door: frontdoor.TrainJobFrontDoor
    calls: RecordedCalls
    service: JobService
    engine: Engine

    async def written(self, job_uid: str, count: int) -> dict[str, Any]:
        """Wait until ``count`` statuses of ``job_uid`` were written; the last."""
        async with asyncio.timeout(30):
            while len(self.calls.statuses(job_uid)) < count:
                self.calls.patched.clear()
                await self.calls.patched.wait()
        return self.calls.statuses(job_uid)[-1]

    async def evented(self, job_uid: str, count: int) -> tuple[str, str, str]:
        """Wait until ``count`` events were recorded on ``job_uid``; the last."""
        async with asyncio.timeout(30):
            while len(self.calls.events(job_uid)) < count:
                self.calls.evented.clear()
                await self.calls.evented.wait()
        return self.calls.events(job_uid)[-1]


class RuntimeApi:
    """The apiserver's runtime objects, for the door's one-off reads
    (k8s_adapter/runtime_source.py ``ClusterRuntimes.fetch``)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.custom = self

    async def raw(self, what: str, fn: Any, *args: Any) -> Any:
        return fn(*args)

    def get_cluster_custom_object(self, group: str, version: str, plural: str,
                                  name: str) -> dict[str, Any]:
        if (plural, name) not in self.objects:
            raise KubeRejected(f"{plural} {name} not found", 404)
        return self.objects[(plural, name)]


def make_door(service: JobService) -> tuple[frontdoor.TrainJobFrontDoor, RecordedCalls]:
    door = frontdoor.TrainJobFrontDoor("kubernetes", frontdoor.FrontDoorSettings(
        kube=KubeSettings(), namespace_users={"team-a": "root"}, status_interval=0.05))
    calls = RecordedCalls()
    door.calls = calls  # type: ignore[assignment]
    door._service = service
    door.runtimes.kube = RuntimeApi()  # type: ignore[assignment]
    door.runtimes.apply = partial(service.set_runtimes, "kubernetes")
    return door, calls


@pytest.fixture
async def bed(tmp_path: Path) -> AsyncIterator[Bed]:
    service, engine, feed = make_service(tmp_path)
    door, calls = make_door(service)
    tasks = [asyncio.create_task(feed.run())]
    yield Bed(door, calls, service, engine)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run_status_loop(door: frontdoor.TrainJobFrontDoor) -> asyncio.Task[None]:
    return asyncio.create_task(door._status_loop())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def admit_for(bed: Bed, job_uid: str, origin: str = "kubernetes") -> int:
    job = trainjob(nodes=1)
    job.metadata.uid = job_uid
    return bed.service.admit(job, ROOT, origin=origin).record.id


# -- pure helpers -------------------------------------------------------------------


def test_finished_reads_complete_or_failed_conditions() -> None:
    assert not finished({})
    assert not finished({"status": {"conditions": [{"type": "Complete", "status": "False"}]}})
    assert finished({"status": {"conditions": [{"type": "Suspended", "status": "False"},
                                               {"type": "Failed", "status": "True"}]}})
    assert ref(obj("u")) == "team-a/train"


# -- admission ----------------------------------------------------------------------


async def test_admit_adds_the_finalizer_first_and_stores_a_kubernetes_job(bed: Bed) -> None:
    assert await bed.door._admit(obj(uid(1)))
    assert bed.calls.calls[0][:2] == ("add_finalizer", uid(1))
    rec = bed.service.get_by_uid(uid(1))
    assert rec is not None and rec.origin == "kubernetes" and rec.attempts == 0


async def test_a_trainjob_taken_before_is_admitted_for_lookup_first(bed: Bed) -> None:
    assert await bed.door._admit(obj(uid(2), finalizers=[frontdoor.FINALIZER]))
    assert not [c for c in bed.calls.calls if c[0] == "add_finalizer"]
    rec = bed.service.get_by_uid(uid(2))
    assert rec is not None and rec.attempts == 1


async def test_a_stale_event_with_the_finalizer_is_not_taken_for_a_job_taken_before(
        bed: Bed) -> None:
    """A watch event that came while the door refused the TrainJob (Kueue's edit of
    the spec, generation 2) still shows the finalizer the refusal removed: the door
    reads the TrainJob again, refuses generation 2 as well, and admits nothing for
    lookup (a job admitted so would stay Suspended, never Failed)."""
    bad = obj(uid(9))
    bad["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    await bed.door._handle(bad, deleted=False)
    stale = obj(uid(9), generation=2, finalizers=[frontdoor.FINALIZER])
    stale["spec"] = bad["spec"]
    server = obj(uid(9), generation=2, annotations={frontdoor.ANN_REFUSED: "1"})
    server["spec"] = bad["spec"]
    bed.calls.server["train"] = server
    await bed.door._handle(stale, deleted=False)
    assert bed.service.get_by_uid(uid(9)) is None
    assert [c[0] for c in bed.calls.calls] == [
        "add_finalizer", "patch_status", "mark_refused", "remove_finalizer",
        "get", "add_finalizer", "patch_status", "mark_refused", "remove_finalizer"]
    # Unchanged since its refusal (the annotation names its generation): left alone.
    bed.calls.server["train"] = {**server, "metadata": {
        **server["metadata"], "annotations": {frontdoor.ANN_REFUSED: "2"}}}
    bed.door._handled.clear()
    await bed.door._handle(stale, deleted=False)
    assert [c[0] for c in bed.calls.calls][9:] == ["get"]
    # Gone, or replaced by another TrainJob of its name, or going: nothing to do (the
    # delete events end it; the new one's own events admit it).
    for now in (None, obj(uid(10)), {**server, "metadata": {
            **server["metadata"], "deletionTimestamp": "2026-12-07T00:00:00Z"}}):
        bed.calls.server["train"] = now
        bed.door._handled.clear()
        before = len(bed.calls.calls)
        await bed.door._handle(stale, deleted=False)
        assert [c[0] for c in bed.calls.calls][before:] == ["get"]
    assert bed.service.get_by_uid(uid(9)) is None
    assert bed.service.get_by_uid(uid(10)) is None


async def test_a_fresh_read_of_another_trainjob_of_the_name_is_not_this_one() -> None:
    """TrainJobCalls.get reads by name: a TrainJob deleted and made again under its name
    (``kubectl replace --force``) is another object, and the one asked about is gone."""
    class Api:
        def __init__(self) -> None:
            self.custom = self
            self.there: dict[str, Any] | None = None

        async def call(self, what: str, fn: Any, *args: Any) -> Any:
            return fn(*args)

        def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
            if self.there is None:
                raise KubeRejected("trainjobs train not found", 404)
            return self.there

    api = Api()
    calls = TrainJobCalls(api)  # type: ignore[arg-type]
    assert await calls.get(obj(uid(12))) is None
    api.there = obj(uid(13))
    assert await calls.get(obj(uid(12))) is None
    api.there = obj(uid(12), generation=3)
    assert await calls.get(obj(uid(12))) == api.there


async def test_a_refused_trainjob_fixed_meanwhile_is_admitted_as_new_not_for_lookup(
        bed: Bed) -> None:
    """The same stale event, but the spec was fixed meanwhile (generation 2 is valid):
    the fresh copy has no finalizer, so the job is new (nothing to look up in a back
    end), not one a bridge may have submitted."""
    bad = obj(uid(11))
    bad["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    await bed.door._handle(bad, deleted=False)
    stale = obj(uid(11), generation=2, finalizers=[frontdoor.FINALIZER])
    bed.calls.server["train"] = obj(uid(11), generation=2,
                                    annotations={frontdoor.ANN_REFUSED: "1"})
    await bed.door._handle(stale, deleted=False)
    rec = bed.service.get_by_uid(uid(11))
    assert rec is not None and rec.attempts == 0
    assert [c[0] for c in bed.calls.calls][4:] == ["get", "add_finalizer"]


async def test_a_bad_trainjob_is_refused_with_a_failed_status(bed: Bed) -> None:
    bad = obj(uid(3))
    bad["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    assert await bed.door._admit(bad)
    assert bed.service.get_by_uid(uid(3)) is None
    assert [c[0] for c in bed.calls.calls] == ["add_finalizer", "patch_status",
                                               "mark_refused", "remove_finalizer"]
    assert last_condition(bed.calls.statuses(uid(3))[0]) == ("Failed", "True",
                                                             "InvalidTrainJob")


async def test_a_runtime_created_just_before_its_trainjob_is_read_at_once(bed: Bed) -> None:
    """``kubectl apply -f runtime.yaml -f trainjob.yaml``: the TrainJob may come
    through its watch before the runtime through its own; the door reads the runtime
    from the apiserver before it refuses the TrainJob."""
    api = bed.door.runtimes.kube
    assert isinstance(api, RuntimeApi)
    api.objects[("clustertrainingruntimes", "fresh")] = {"metadata": {"name": "fresh"}, "spec": {
        "mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [{
            "name": "node", "template": {"metadata": {"labels": {
                "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{
                    "name": "node", "image": "site/fresh:1"}]}}}}}]}}}}
    job = obj(uid(13))
    job["spec"]["runtimeRef"]["name"] = "fresh"
    assert await bed.door._admit(job)
    rec = bed.service.get_by_uid(uid(13))
    assert rec is not None and rec.shape is not None
    assert JobShape.from_json(rec.shape).plan.image == "site/fresh:1"  # the runtime's


# -- status write-back --------------------------------------------------------------


async def test_status_follows_changes_updates_and_skips_other_jobs(bed: Bed) -> None:
    """Trainer's conditions say nothing while the job waits or runs; jobsStatus counts
    the back end's job, and each change of state or reason is one event."""
    job_id = admit_for(bed, uid(4))
    bed.door._objects[uid(4)] = obj(uid(4))
    loop = await run_status_loop(bed.door)
    try:
        # Known at start: synced once though nothing changed since; what it showed
        # then is taken as recorded (no event).
        status = await bed.written(uid(4), 1)
        assert last_condition(status) is None and node_counts(status) == (0, 0)
        assert bed.calls.events(uid(4)) == []
        # A state change (an outbox event).
        bed.engine.store.transition(job_id, JobState.SUBMITTED, "Submitted", "queued",
                                    backend_id="7", attempts=1)
        assert node_counts(await bed.written(uid(4), 2)) == (1, 0)
        assert (await bed.evented(uid(4), 1))[:2] == ("Submitted", "Normal")
        # A change within the state (no outbox event): the status says the same (not
        # written again), the event says why.
        bed.engine.store.transition(job_id, JobState.SUBMITTED, "Priority", "waits")
        assert await bed.evented(uid(4), 2) == ("Priority", "Normal", "waits (slurm job 7)")
        # Another origin's job with a TrainJob-like uid is not the door's.
        other = admit_for(bed, uid(5), origin="api")
        bed.door._objects[uid(5)] = obj(uid(5), name="other")
        bed.service.cancel(bed.service.get(other), ROOT)
        bed.engine.store.transition(job_id, JobState.RUNNING, "Running", "running",
                                    nodes=["node1"])
        status = await bed.written(uid(4), 3)
        assert last_condition(status) is None and node_counts(status) == (1, 1)
        assert await bed.evented(uid(4), 3) == ("Running", "Normal", "running on node1")
        assert bed.calls.statuses(uid(5)) == [] and bed.calls.events(uid(5)) == []
        assert len(bed.calls.statuses(uid(4))) == 3
    finally:
        await stop(loop)


async def test_a_failed_status_write_is_tried_again(bed: Bed) -> None:
    job_id = admit_for(bed, uid(6))
    bed.door._objects[uid(6)] = obj(uid(6))
    bed.calls.fail_next_patch = True
    loop = await run_status_loop(bed.door)
    try:
        assert last_condition(await bed.written(uid(6), 1)) is None
        bed.service.cancel(bed.service.get(job_id), ROOT)
        assert last_condition(await bed.written(uid(6), 2)) == ("Failed", "True", "Cancelled")
    finally:
        await stop(loop)


async def test_a_restarted_door_converges_on_what_changed_while_it_was_away(bed: Bed
                                                                            ) -> None:
    job_id = admit_for(bed, uid(7))
    bed.service.cancel(bed.service.get(job_id), ROOT)  # before any door runs
    door, calls = make_door(bed.service)
    door._objects[uid(7)] = obj(uid(7))
    bed.door, bed.calls = door, calls
    loop = await run_status_loop(door)
    try:
        status = await bed.written(uid(7), 1)
        assert last_condition(status) == ("Failed", "True", "Cancelled")
        # Cancelled before this door started: the door that saw it recorded the event.
        assert calls.events(uid(7)) == []
    finally:
        await stop(loop)


async def test_a_trainjob_the_watch_delivers_later_is_synced(bed: Bed) -> None:
    admit_for(bed, uid(8))
    loop = await run_status_loop(bed.door)
    try:
        bed.door._objects[uid(8)] = obj(uid(8))  # what _handle does for a watch event
        bed.door._dirty.add(uid(8))
        bed.door._wake.set()
        assert node_counts(await bed.written(uid(8), 1)) == (0, 0)
    finally:
        await stop(loop)


async def test_a_new_trainjob_is_admitted_with_an_event(bed: Bed) -> None:
    admit_for(bed, uid(11))
    bed.door._objects[uid(11)] = obj(uid(11), name="earlier")
    loop = await run_status_loop(bed.door)
    try:
        await bed.written(uid(11), 1)  # the door has started
        job_id = admit_for(bed, uid(9))  # after the door started
        bed.door._objects[uid(9)] = obj(uid(9))
        bed.door._dirty.add(uid(9))
        bed.door._wake.set()
        reason, kind, message = await bed.evented(uid(9), 1)
        assert (reason, kind) == ("Admitted", "Normal") and f"job {job_id}" in message
    finally:
        await stop(loop)


async def test_a_flipping_reason_cannot_flood_the_apiserver(bed: Bed) -> None:
    """A queue's reason flipping every pass records EVENT_BURST events, not one per
    flip; a change of state is still recorded."""
    job_id = admit_for(bed, uid(10))
    bed.door._objects[uid(10)] = obj(uid(10))
    store = bed.engine.store
    rec = store.transition(job_id, JobState.SUBMITTED, "Submitted", "queued",
                           backend_id="8", attempts=1)
    for i in range(40):
        rec = store.transition(job_id, JobState.SUBMITTED,
                               "Priority" if i % 2 else "Resources", "waits")
        await bed.door.events.record(bed.calls, obj(uid(10)), rec)
    assert len(bed.calls.events(uid(10))) == 1 + EVENT_BURST
    assert bed.door.events.due() == []  # not before a minute
    # Held and let go within the state, with the reasons' allowance spent: both recorded
    # (their own allowance) ...
    for reason in ("BackendSuspended", "Resources"):
        rec = store.transition(job_id, JobState.SUBMITTED, reason, "waits")
        await bed.door.events.record(bed.calls, obj(uid(10)), rec)
    assert [e[0] for e in bed.calls.events(uid(10))[-2:]] == ["BackendSuspended", "Resources"]
    # ... and a hold, refusal, release flapping (scontrol hold/release in a loop) cannot
    # flood either: EVENT_BURST of them in all.
    for i in range(30):
        rec = store.transition(job_id, JobState.SUBMITTED,
                               ("BackendSuspended", "SuspendRefused", "Priority")[i % 3], "w")
        await bed.door.events.record(bed.calls, obj(uid(10)), rec)
    assert len(bed.calls.events(uid(10))) == 1 + 2 * EVENT_BURST
    rec = store.transition(job_id, JobState.RUNNING, "Running", "running", nodes=["n1"])
    await bed.door.events.record(bed.calls, obj(uid(10)), rec)
    assert bed.calls.events(uid(10))[-1][0] == "Running"


async def test_a_reason_held_back_is_recorded_once_the_allowance_is_back(
        bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reason a queue settles on while its job's allowance is spent is the one the
    events end with: the door looks at the job again when the allowance is back."""
    monkeypatch.setattr(event_recorder, "EVENT_BURST", 1)
    monkeypatch.setattr(event_recorder, "EVENT_REFILL_SECONDS", 0.2)
    job_id = admit_for(bed, uid(12))
    bed.door._objects[uid(12)] = obj(uid(12))
    store = bed.engine.store
    store.transition(job_id, JobState.SUBMITTED, "Submitted", "queued", backend_id="9",
                     attempts=1)
    loop = await run_status_loop(bed.door)
    try:
        await bed.written(uid(12), 1)
        for reason in ("Priority", "Resources", "QOSMaxJobs"):  # the last is held back
            store.transition(job_id, JobState.SUBMITTED, reason, "waits")
        async with asyncio.timeout(30):
            while not bed.calls.events(uid(12)) or (
                    bed.calls.events(uid(12))[-1][0] != "QOSMaxJobs"):
                bed.calls.evented.clear()
                await bed.calls.evented.wait()
    finally:
        await stop(loop)


async def test_the_echo_of_its_own_status_write_makes_no_sync(bed: Bed) -> None:
    """Each status write comes back as a watch event of the TrainJob: it is not a
    reason to sync that TrainJob again. A status someone else wrote is."""
    admit_for(bed, uid(11))
    mine = {"conditions": [], "jobsStatus": [{"name": "node", "active": 1, "ready": 0,
                                              "succeeded": 0, "failed": 0, "suspended": 0}]}
    bed.door._written[uid(11)] = mine
    echo = obj(uid(11))
    echo["status"] = json.loads(json.dumps(mine))
    await bed.door._handle(echo, deleted=False)
    assert uid(11) not in bed.door._dirty
    other = obj(uid(11))
    other["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    await bed.door._handle(other, deleted=False)
    assert uid(11) in bed.door._dirty
