"""``tcontrol hold``/``release`` of a job already waiting in its back end's queue
(bridge/engine_hold.py, bridge/engine_signals.py): held there as its owner, or as root
for an administrator's hold that only root releases; a crash between the request and
the back end still sends it; a client cannot forge the mark; a hold someone made in the
world is not the bridge's to release."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.backend import BackendJob, BackendState, Owner
from bridge.engine import Engine
from bridge.engine_signals import ROOT
from bridge.errors import Conflict, PermissionDenied
from bridge.feed import EventFeed
from bridge.model import ANN_HOLD
from bridge.outcome import outcome
from bridge.runtimes import RuntimeCatalog
from bridge.service import JobService
from bridge.states import JobState
from bridge.store import JobRecord
from tests.unit.builders import ALICE, BOB
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import settle
from tests.unit.test_engine_kubernetes import PodBackend, _engine, pods_inventory


class HoldingBackend(PodBackend):
    """Records as whom each suspend/resume (hold/release) was sent."""

    def __init__(self) -> None:
        super().__init__(pods_inventory())
        self.sent: list[tuple[str, bool, str]] = []

    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        self.sent.append((backend_id, suspend, owner.user))


async def submitted(tmp_path: Path) -> tuple[Engine, HoldingBackend, JobService, JobRecord]:
    backend = HoldingBackend()
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    rec = e.store.get(rec.id)
    assert rec.state is JobState.SUBMITTED and rec.backend_id
    return e, backend, JobService(e, EventFeed(e.store)), rec


def report(rec: JobRecord, reason: str) -> BackendJob:
    return BackendJob(rec.backend_id or "", rec.uid, BackendState.PENDING, reason=reason,
                      native_state="PENDING")


async def test_the_owner_holds_and_releases_a_job_in_its_back_ends_queue(
        tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    with pytest.raises(PermissionDenied):
        service.hold(rec, BOB)
    held = service.hold(rec, ALICE)
    assert held.state is JobState.SUBMITTED and held.summary["heldInBackend"] == "JobHeldUser"
    assert service.hold(held, ALICE) is held  # again: nothing to do
    await e.reconcile_once()
    await e.reconcile_once()  # sent once
    assert backend.sent == [(rec.backend_id, True, "alice")]
    assert e.store.get(rec.id).reason == "JobHeldUser"
    with pytest.raises(PermissionDenied):
        service.release(e.store.get(rec.id), BOB)
    released = service.release(e.store.get(rec.id), ALICE)
    assert released.summary["heldInBackend"] == "Released"
    await e.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, False, "alice")
    after = e.store.get(rec.id)
    assert after.reason == "Released" and "heldInBackend" not in after.summary
    assert ANN_HOLD not in after.job.metadata.annotations
    with pytest.raises(Conflict, match="not held"):
        service.release(after, ALICE)


async def test_roots_hold_is_sent_as_root_and_only_root_releases_it(tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    root = Owner(0, 0, "root")
    service.hold(service.hold(rec, ALICE), root)  # the owner's hold, made an admin's
    assert e.store.get(rec.id).summary["heldInBackend"] == "JobHeldAdmin"
    assert service.hold(e.store.get(rec.id), ALICE).summary["heldInBackend"] == "JobHeldAdmin"
    await e.reconcile_once()
    assert backend.sent == [(rec.backend_id, True, "root")]
    with pytest.raises(PermissionDenied, match="administrator"):
        service.release(e.store.get(rec.id), ALICE)
    service.release(e.store.get(rec.id), root)
    await e.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, False, "root") and ROOT.uid == 0


async def test_a_restart_sends_what_was_asked_and_not_what_someone_else_did(
        tmp_path: Path) -> None:
    e, backend, service, rec = await submitted(tmp_path)
    service.hold(rec, ALICE)  # the daemon dies before sending it
    again = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    await again.reconcile_once()
    assert backend.sent == [(rec.backend_id, True, "alice")]
    # Slurm says it is held; the release is asked, and the daemon dies again.
    e.store.transition(rec.id, JobState.SUBMITTED, "JobHeldUser", "PENDING")
    JobService(again, EventFeed(e.store)).release(e.store.get(rec.id), ALICE)
    third = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    await third.reconcile_once()
    assert backend.sent[-1] == (rec.backend_id, False, "alice")
    # A hold made in the world (the user's own scontrol hold) is left alone.
    other = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    e.store.transition(other.id, JobState.SUBMITTED, "JobHeldUser", "PENDING")
    fourth = Engine(e.store, {"slurm": backend}, RuntimeCatalog(), e.settings)
    count = len(backend.sent)
    await fourth.reconcile_once()
    assert len(backend.sent) == count


async def test_only_a_job_that_never_started_is_held_in_its_back_end(tmp_path: Path) -> None:
    e, _backend, service, rec = await submitted(tmp_path)
    running = e.store.transition(rec.id, JobState.RUNNING, "Running", "RUNNING",
                                 started_at=1.0)
    with pytest.raises(Conflict, match="no longer pending"):
        service.hold(running, ALICE)


async def test_a_client_cannot_forge_the_hold_mark(tmp_path: Path) -> None:
    e, _backend, _service, _rec = await submitted(tmp_path)
    job = trainjob(nodes=1)
    job.metadata.annotations[ANN_HOLD] = "ReleasedAdmin"
    forged = e.admit(job, ALICE)
    assert "heldInBackend" not in forged.summary
    assert ANN_HOLD not in e.store.get(forged.id).job.metadata.annotations


async def test_a_kubernetes_style_report_keeps_the_holds_reason(tmp_path: Path) -> None:
    e, _backend, service, rec = await submitted(tmp_path)
    held = service.hold(rec, ALICE)
    suspended = BackendJob(rec.backend_id or "", rec.uid, BackendState.SUSPENDED,
                           native_state="Suspended")
    change = outcome(held, suspended)
    assert change is not None and (change.state, change.reason) == (
        JobState.SUBMITTED, "JobHeldUser")
    assert outcome(e.store.get(rec.id), report(rec, "Priority")) is not None
