"""``tcontrol hold``/``release`` of a job already waiting in its back end's queue
(bridge/engine_hold.py, bridge/engine_queue_hold.py): held there as its owner, or as
root for an administrator's hold that only root releases; suspend and resume (the
TrainJob door's included) cannot undo a hold; a crash between the request and the back
end still sends it; a refused hold is cleared; a hold someone made in the world is not
the bridge's to release; back ends without an administrator's hold are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.backend import BackendRejected, Owner
from bridge.engine import Engine
from bridge.engine_signals import SUSPENDS_PER_USER
from bridge.errors import Conflict, PermissionDenied
from bridge.feed import EventFeed
from bridge.runtimes import RuntimeCatalog
from bridge.service import JobService
from bridge.states import JobState
from bridge.store import JobRecord
from tests.unit.builders import ALICE, BOB
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import settle
from tests.unit.test_engine_kubernetes import PodBackend, _engine, pods_inventory

ROOT = Owner(0, 0, "root")


class HoldingBackend(PodBackend):
    """Records as whom each queue hold/release and each suspend/resume was sent."""

    def __init__(self) -> None:
        super().__init__(pods_inventory())
        self.sent: list[tuple[str, bool, str]] = []
        self.refuse = False

    async def hold_in_queue(self, backend_id: str, hold: bool, owner: Owner) -> None:
        if self.refuse:
            raise BackendRejected("Job is no longer pending execution")
        self.sent.append((backend_id, hold, owner.user))

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        self.sent.append((backend_id, suspend, f"suspend:{owner.user}"))


async def submitted(tmp_path: Path, backend: PodBackend | None = None
                    ) -> tuple[Engine, HoldingBackend, JobService, JobRecord]:
    backend = backend or HoldingBackend()
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    rec = e.store.get(rec.id)
    assert rec.state is JobState.SUBMITTED and rec.backend_id
    return e, backend, JobService(e, EventFeed(e.store)), rec  # type: ignore[return-value]


def shown(e: Engine, rec: JobRecord, reason: str) -> None:
    """The back end's report: the job waits with ``reason``."""
    e.store.transition(rec.id, JobState.SUBMITTED, reason, "PENDING")


async def test_the_owner_holds_and_releases_a_job_in_its_back_ends_queue(
        tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    with pytest.raises(PermissionDenied):
        service.hold(rec, BOB)
    held = service.hold(rec, ALICE)
    assert held.state is JobState.SUBMITTED and held.held == "JobHeldUser"
    assert service.hold(held, ALICE) is held  # again: nothing to do
    await e.reconcile_once()
    await e.reconcile_once()  # sent once
    assert backend.sent == [(rec.backend_id, True, "alice")]
    assert e.store.get(rec.id).reason == "JobHeldUser"
    with pytest.raises(PermissionDenied):
        service.release(e.store.get(rec.id), BOB)
    released = service.release(e.store.get(rec.id), ALICE)
    assert released.held == "Released"
    await e.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, False, "alice")
    after = e.store.get(rec.id)
    assert after.reason == "Released" and after.held is None
    assert after.job.spec.suspend is False
    with pytest.raises(Conflict, match="not held"):
        service.release(after, ALICE)
    await e.reconcile_once()
    assert len(backend.sent) == 2  # nothing else: no suspend/resume either


async def test_roots_hold_is_sent_as_root_and_only_root_releases_it(tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    service.hold(service.hold(rec, ALICE), ROOT)  # the owner's hold, made an admin's
    assert e.store.get(rec.id).held == "JobHeldAdmin"
    assert service.hold(e.store.get(rec.id), ALICE).held == "JobHeldAdmin"
    await e.reconcile_once()
    assert backend.sent == [(rec.backend_id, True, "root")]
    with pytest.raises(PermissionDenied, match="administrator"):
        service.release(e.store.get(rec.id), ALICE)
    service.release(e.store.get(rec.id), ROOT)
    await e.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, False, "root")


@pytest.mark.parametrize("who", [ALICE, ROOT])
async def test_suspend_and_resume_cannot_undo_a_hold(tmp_path: Path, who: Owner) -> None:
    """Root's hold, before and after it is sent: neither alice's resume nor the
    TrainJob door's spec.suspend (as root) undoes it."""
    e, backend, service, rec = await submitted(tmp_path)
    service.hold(rec, ROOT)
    for _ in range(2):
        with pytest.raises(Conflict, match="release it"):
            service.resume(e.store.get(rec.id), who)
        with pytest.raises(Conflict, match="release it"):
            e.set_suspend(e.store.get(rec.id), False, who)
        await e.reconcile_once()
    assert backend.sent == [(rec.backend_id, True, "root")]
    assert e.store.get(rec.id).held == "JobHeldAdmin"


async def test_a_release_before_the_hold_was_sent_sends_nothing_and_leaves_no_mark(
        tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    service.release(service.hold(rec, ROOT), ROOT)  # within one pass
    await e.reconcile_once()
    assert backend.sent == [] and e.store.get(rec.id).held is None
    # Later suspends and resumes are the owner's, never root's.
    e.set_suspend(e.store.get(rec.id), True, ALICE)
    await e.reconcile_once()
    e.set_suspend(e.store.get(rec.id), False, ALICE)
    await e.reconcile_once()
    assert [who for *_, who in backend.sent] == ["suspend:alice", "suspend:alice"]


async def test_a_restart_sends_what_was_asked_and_not_what_someone_else_did(
        tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    service.hold(rec, ALICE)  # the daemon dies before sending it
    again = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    await again.reconcile_once()
    assert backend.sent == [(rec.backend_id, True, "alice")]
    shown(e, rec, "JobHeldUser")  # Slurm says so; the release is asked; the daemon dies
    JobService(again, EventFeed(e.store)).release(e.store.get(rec.id), ALICE)
    third = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    await third.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, False, "alice")
    assert e.store.get(rec.id).held is None
    # A hold made in the world (the user's own scontrol hold) is left alone.
    other = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    shown(e, e.store.get(other.id), "JobHeldUser")
    fourth = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    count = len(backend.sent)
    await fourth.reconcile_once()
    assert len(backend.sent) == count


async def test_a_release_the_back_end_already_applied_is_not_sent_again(
        tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    service.hold(rec, ALICE)
    await e.reconcile_once()
    shown(e, rec, "JobHeldUser")
    service.release(e.store.get(rec.id), ALICE)
    shown(e, rec, "Priority")  # sent by a daemon that died before recording it
    again = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    await again.reconcile_once()
    assert len(backend.sent) == 1 and e.store.get(rec.id).held is None


async def test_a_stale_report_after_a_hold_does_not_swallow_the_release(
        tmp_path: Path) -> None:
    """A poll asked for before root's hold and applied after it shows the job's old
    reason (no hold): root's release must still be sent (else Slurm keeps the job
    held for good while the bridge believes it released)."""
    e, backend, service, rec = await submitted(tmp_path)
    service.hold(rec, ROOT)
    await e.reconcile_once()
    assert backend.sent == [(rec.backend_id, True, "root")]
    shown(e, rec, "BeginTime")  # the slow listing, from before the hold
    service.release(e.store.get(rec.id), ROOT)
    await e.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, False, "root")
    assert e.store.get(rec.id).held is None


async def test_a_refused_hold_is_cleared_and_may_be_asked_again(tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    backend.refuse = True  # it started meanwhile
    service.hold(rec, ROOT)
    await e.reconcile_once()
    after = e.store.get(rec.id)
    assert after.held is None and after.job.spec.suspend is False
    assert after.reason == "SuspendRefused" and "no longer pending" in after.message
    backend.refuse = False
    service.hold(after, ROOT)
    await e.reconcile_once()
    assert backend.sent == [(rec.backend_id, True, "root")]


async def test_a_job_that_started_is_not_held_but_a_hold_can_always_be_released(
        tmp_path: Path) -> None:
    e, _backend, service, rec = await submitted(tmp_path)
    held = service.hold(rec, ROOT)
    running = e.store.transition(held.id, JobState.RUNNING, "Running", "RUNNING",
                                 started_at=1.0)
    with pytest.raises(Conflict, match="no longer pending"):
        service.hold(e.store.transition(running.id, JobState.RUNNING, "Running", "",
                                        held=None), ALICE)
    e.store.update(rec.id, held="JobHeldAdmin")
    assert service.release(e.store.get(rec.id), ROOT).held == "ReleasedAdmin"


async def test_back_ends_without_an_administrators_hold_hold_only_before_submission(
        tmp_path: Path) -> None:
    _e, _backend, service, rec = await submitted(tmp_path, PodBackend(pods_inventory()))
    with pytest.raises(Conflict, match="no longer pending"):
        service.hold(rec, ALICE)


async def test_the_trainjob_doors_resume_cannot_end_a_hold_before_the_back_end(
        tmp_path: Path) -> None:
    e, _backend, service, _rec = await submitted(tmp_path)
    waiting = e.admit(trainjob(nodes=1), ALICE)  # not submitted yet
    held = service.hold(waiting, ROOT)
    assert (held.state, held.reason) == (JobState.SUSPENDED, "JobHeldAdmin")
    with pytest.raises(Conflict, match="release it"):
        service.set_suspend(held, False, ROOT)  # what the door does on spec.suspend
    assert service.release(e.store.get(held.id), ROOT).state is JobState.PENDING


async def test_a_hold_asked_while_a_release_is_sent_is_not_lost(tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    service.hold(rec, ALICE)
    await e.reconcile_once()
    shown(e, rec, "JobHeldUser")
    service.release(e.store.get(rec.id), ALICE)
    sent = backend.hold_in_queue

    async def meanwhile(backend_id: str, hold: bool, owner: Owner) -> None:
        await sent(backend_id, hold, owner)
        if not hold:  # root's hold arrives while alice's release is in flight
            e.store.update(rec.id, held="JobHeldAdmin")

    backend.hold_in_queue = meanwhile  # type: ignore[method-assign]
    await e.reconcile_once()
    assert e.store.get(rec.id).held == "JobHeldAdmin"
    await e.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, True, "root")


async def test_an_owners_own_holds_do_not_use_up_roots_turn(tmp_path: Path) -> None:
    e, backend, service, _rec = await submitted(tmp_path)
    own = [e.admit(trainjob(nodes=1), ALICE) for _ in range(SUSPENDS_PER_USER)]
    target = e.admit(trainjob(nodes=1), ALICE)
    while any(e.store.get(j.id).backend_id is None for j in [*own, target]):
        await settle(e)  # a few a pass (max_parallel_submits)
    for job in own:
        service.hold(e.store.get(job.id), ALICE)
    service.hold(e.store.get(target.id), ROOT)
    await e.reconcile_once()
    assert (e.store.get(target.id).backend_id, True, "root") in backend.sent


async def test_no_hold_while_a_release_is_being_sent(tmp_path: Path) -> None:
    e, _backend, service, rec = await submitted(tmp_path)
    service.release(service.hold(rec, ROOT), ROOT)
    with pytest.raises(Conflict, match="release is being sent"):
        service.hold(e.store.get(rec.id), ALICE)
