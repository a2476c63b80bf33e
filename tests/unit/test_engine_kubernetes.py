"""What the engine does differently for a back end whose job nodes are pods
(``packs_units``) and that can suspend running jobs (:class:`Suspendable`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from pathlib import Path

import pytest

from bridge.backend import (
    BackendJob,
    BackendRejected,
    BackendState,
    Inventory,
    NodeInfo,
    Owner,
    StatusBatch,
    Suspendable,
)
from bridge.engine import Engine, EngineError, EngineSettings
from bridge.engine_signals import SUSPENDS_PER_USER
from bridge.model import ValidationError
from bridge.placement_decision import plan_placement
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.states import JobState
from bridge.store import Store
from bridge.topology import topology_from_inventory
from tests.unit.builders import ALICE
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend, settle

RACKS = {"rack-1": ((), ("n1", "n2")), "rack-2": ((), ("n3", "n4")),
         "block": (("rack-1", "rack-2"), ())}


def pods_inventory() -> Inventory:
    return Inventory(nodes=tuple(NodeInfo(f"n{i}", "IDLE", 32, 32, 256_000, 256_000)
                                 for i in range(1, 5)), switches=RACKS)


class PodBackend(FakeBackend):
    """Packs pods; suspends running jobs."""

    packs_units = True

    def __init__(self, inv: Inventory) -> None:
        super().__init__(inv)
        self.suspends: list[tuple[str, bool]] = []

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        self.suspends.append((backend_id, suspend))


def _engine(tmp_path: Path, backend: FakeBackend, mode: str = "nodelist") -> Engine:
    return Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
                  EngineSettings(default_backend="slurm", placement={"slurm": mode},
                                 placement_max_age=0.0))


def test_packing_places_four_pods_in_one_rack_where_hosts_would_take_two_racks() -> None:
    job = trainjob(nodes=4)
    job.spec.trainer.resources_per_node = {"requests": {"cpu": "16"}}  # type: ignore[union-attr,assignment]
    plan = RuntimeCatalog().resolve(job)
    topo = topology_from_inventory(pods_inventory())
    packed = plan_placement(job, plan, SchedulingOptions(), "nodelist", topo, 0.0, 0.0,
                            pack_units=True)
    hosts = plan_placement(job, plan, SchedulingOptions(), "nodelist", topo, 0.0, 0.0)
    assert packed.placement is not None and packed.placement.leaf_domains == ("rack-1",)
    assert sorted(packed.placement.hosts) == ["n1", "n2"]
    assert packed.placement.units == (2, 2)
    assert hosts.placement is not None and len(hosts.placement.leaf_domains) == 2


async def test_more_nodes_than_hosts_is_refused_only_when_nodes_are_hosts(
        tmp_path: Path) -> None:
    for backend, refused in ((FakeBackend(pods_inventory()), True),
                             (PodBackend(pods_inventory()), False)):
        e = _engine(tmp_path / type(backend).__name__, backend)
        e._inventories.set("slurm", pods_inventory())
        if refused:
            with pytest.raises(ValidationError, match="8 nodes requested"):
                e.admit(trainjob(nodes=8), ALICE)
        else:
            assert e.admit(trainjob(nodes=8), ALICE).state is JobState.PENDING


async def test_a_running_job_is_suspended_and_resumed_through_a_suspendable_back_end(
        tmp_path: Path) -> None:
    backend = PodBackend(pods_inventory())
    assert isinstance(backend, Suspendable)
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    rec = e.store.get(rec.id)
    assert rec.state is JobState.SUBMITTED and rec.backend_id

    rec = e.set_suspend(rec, True, ALICE)
    assert rec.job.spec.suspend is True
    await e.reconcile_once()
    assert backend.suspends == [(rec.backend_id, True)]
    await e.reconcile_once()  # sent once, not every pass
    assert len(backend.suspends) == 1
    assert e.store.get(rec.id).reason == "Suspended"

    e.set_suspend(e.store.get(rec.id), False, ALICE)
    await e.reconcile_once()
    assert backend.suspends[-1] == (rec.backend_id, False)
    assert e.store.get(rec.id).reason == "Resumed"


async def test_a_suspend_asked_again_is_sent_while_the_world_still_shows_the_last_one(
        tmp_path: Path) -> None:
    """Resumed by this process, then a status report still showing it suspended (the
    resume not yet applied there), then suspended again: the store's row looks settled
    (asks for a suspend, shows one), but the last thing sent was a resume, so the
    suspend is sent (the engine adds the jobs it sent something to by id)."""
    backend = PodBackend(pods_inventory())
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    e.set_suspend(e.store.get(rec.id), True, ALICE)
    await e.reconcile_once()
    e.set_suspend(e.store.get(rec.id), False, ALICE)
    await e.reconcile_once()
    assert backend.suspends[-1] == (e.store.get(rec.id).backend_id, False)
    e.store.update(rec.id, reason="BackendSuspended")  # a report from before the resume
    e.set_suspend(e.store.get(rec.id), True, ALICE)
    assert rec.id not in [r.id for r in e.store.suspend_candidates("slurm")]
    await e.reconcile_once()
    assert backend.suspends[-1] == (e.store.get(rec.id).backend_id, True)
    assert len(backend.suspends) == 3


async def test_a_restarted_engine_sends_a_suspend_the_world_has_not_applied(
        tmp_path: Path) -> None:
    backend = PodBackend(pods_inventory())
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    e.set_suspend(e.store.get(rec.id), True, ALICE)  # the daemon dies before sending it
    again = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    await again.reconcile_once()
    assert backend.suspends == [(e.store.get(rec.id).backend_id, True)]


async def test_a_running_job_of_a_back_end_that_cannot_suspend_is_refused(
        tmp_path: Path) -> None:
    backend = FakeBackend(pods_inventory())
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    with pytest.raises(EngineError, match="cannot suspend"):
        e.set_suspend(e.store.get(rec.id), True, ALICE)
    await asyncio.sleep(0)


async def test_a_status_seen_before_the_submit_is_recorded_is_applied_after_it(
        tmp_path: Path) -> None:
    """A watch can report a job before the submit call returns; a JobSet that finishes at
    once is never reported again, so that early word must not be lost."""
    backend = PodBackend(pods_inventory())
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    done = BackendJob(backend_id="101", job_uid=rec.uid, state=BackendState.COMPLETED,
                      native_state="Completed", exit_code=0)
    e.apply_status("slurm", StatusBatch((done,), complete=False, at=time.time()))
    assert e.store.get(rec.id).state is JobState.PENDING
    await settle(e)  # the submit returns "101"
    assert e.store.get(rec.id).state is JobState.SUCCEEDED


class AdoptingBackend(PodBackend):
    """Knows a finished job carrying the uid (the daemon died after submitting it)."""

    def __init__(self, inv: Inventory, found: dict[str, BackendJob]) -> None:
        super().__init__(inv)
        self.found = found

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        return [bj for u, bj in self.found.items() if u in job_uids]


async def test_an_adopted_job_takes_the_state_the_lookup_found(tmp_path: Path) -> None:
    found: dict[str, BackendJob] = {}
    backend = AdoptingBackend(pods_inventory(), found)
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    # A submit was attempted by a daemon that died: attempts 1, not recorded.
    e.store.update(rec.id, attempts=1, submitting_since=time.time() - 3600)
    found[rec.uid] = BackendJob(backend_id="ns/j", job_uid=rec.uid,
                                state=BackendState.COMPLETED, native_state="Completed",
                                exit_code=0)
    await settle(e)
    after = e.store.get(rec.id)
    assert after.state is JobState.SUCCEEDED and after.backend_id == "ns/j"
    assert backend.submitted == []


class RefusingBackend(PodBackend):
    """Refuses every suspend (Slurm: a --no-requeue job, or one that has finished)."""

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        self.suspends.append((backend_id, suspend))
        raise BackendRejected("Requested operation is presently disabled")


async def test_a_refused_suspend_is_final_until_asked_again(tmp_path: Path) -> None:
    """A refusal is not retried every pass: the job's reason says so; a new request
    (resume, then suspend) is tried once more."""
    backend = RefusingBackend(pods_inventory())
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    e.set_suspend(e.store.get(rec.id), True, ALICE)
    for _ in range(3):
        await e.reconcile_once()
    assert len(backend.suspends) == 1
    shown = e.store.get(rec.id)
    assert shown.reason == "SuspendRefused" and "presently disabled" in shown.message
    e.set_suspend(e.store.get(rec.id), False, ALICE)
    e.set_suspend(e.store.get(rec.id), True, ALICE)
    await e.reconcile_once()
    assert len(backend.suspends) == 2


async def test_one_user_gets_a_few_suspends_a_pass(tmp_path: Path) -> None:
    """One user's many suspends go out SUSPENDS_PER_USER a pass, not all in one."""
    backend = PodBackend(pods_inventory())
    e = _engine(tmp_path, backend)
    recs = [e.admit(trainjob(nodes=1), ALICE) for _ in range(SUSPENDS_PER_USER + 3)]
    for _ in range(3):  # submitted in turns too (max_parallel_submits)
        await settle(e)
    assert all(e.store.get(r.id).state is JobState.SUBMITTED for r in recs)
    for rec in recs:
        e.set_suspend(e.store.get(rec.id), True, ALICE)
    await e.reconcile_once()
    assert len(backend.suspends) == SUSPENDS_PER_USER
    await e.reconcile_once()
    assert len(backend.suspends) == SUSPENDS_PER_USER + 3


class BrokenBackend(PodBackend):
    """Fails one job's suspend with an error the seam does not name (a bug, data it
    cannot read)."""

    def __init__(self, inv: Inventory) -> None:
        super().__init__(inv)
        self.broken: set[str] = set()

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        self.suspends.append((backend_id, suspend))
        if backend_id in self.broken:
            raise TypeError("'str' object is not a mapping")


async def test_one_jobs_failing_suspend_does_not_stop_the_others(tmp_path: Path) -> None:
    """The pass goes on to the next job (and the next back end); the failed one is tried
    again next pass."""
    backend = BrokenBackend(pods_inventory())
    e = _engine(tmp_path, backend)
    first, second = (e.admit(trainjob(nodes=1), ALICE) for _ in range(2))
    await settle(e)
    backend.broken.add(str(e.store.get(first.id).backend_id))
    for rec in (first, second):
        e.set_suspend(e.store.get(rec.id), True, ALICE)
    await e.reconcile_once()
    assert [s for _, s in backend.suspends] == [True, True]
    assert e.store.get(second.id).reason == "Suspended"
    await e.reconcile_once()
    assert len(backend.suspends) == 3  # the failed one again, the sent one not


class EndingBackend(PodBackend):
    """The job ends (the tracker records it) while the refusal is on its way."""

    def __init__(self, inv: Inventory, engine_ref: list[Engine]) -> None:
        super().__init__(inv)
        self.engine_ref = engine_ref

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        e = self.engine_ref[0]
        rec = next(r for r in e.store.list_jobs() if r.backend_id == backend_id)
        e.store.transition(rec.id, JobState.SUCCEEDED, "Completed", "exit code 0")
        e._forget(rec.id)
        raise BackendRejected(f"job {backend_id} is COMPLETED: nothing to suspend")


async def test_a_job_that_ends_while_its_suspend_is_refused_stops_nothing(
        tmp_path: Path) -> None:
    ref: list[Engine] = []
    backend = EndingBackend(pods_inventory(), ref)
    e = _engine(tmp_path, backend)
    ref.append(e)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    e.set_suspend(e.store.get(rec.id), True, ALICE)
    await e.reconcile_once()  # no IllegalTransition out of the pass
    assert e.store.get(rec.id).state is JobState.SUCCEEDED
    assert rec.id not in e._signals._suspend_refused
