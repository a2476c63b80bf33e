"""A back-end job is a stored job's only when key AND owner match (bridge.ownership)."""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendJob, BackendState, Owner, StatusBatch
from bridge.engine import Engine, EngineSettings
from bridge.ownership import OwnerCheck, foreign_reason
from bridge.runtimes import RuntimeCatalog
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, inventory
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend, settle

UID = "0b6f1c1e-3f0c-4b8e-9a55-3d8f2f0c9a11"


def job(backend_id: str, owner_uid: int | None = None,
        namespace: str | None = None) -> BackendJob:
    return BackendJob(backend_id=backend_id, job_uid=UID, state=BackendState.RUNNING,
                      owner_uid=owner_uid, namespace=namespace)


class DaemonRuns:
    """A back end that runs every job as uid 999 (Flux ``submit_as = "daemon"``)."""

    def world_uid(self, owner: Owner) -> int:
        return 999


@given(st.integers(0, 2**31), st.integers(0, 2**31))
def test_an_owner_uid_other_than_the_jobs_is_foreign(theirs: int, ours: int) -> None:
    why = foreign_reason(job("1", theirs), ours, "default")
    assert (why is None) == (theirs == ours)


def test_unknown_owner_and_namespace_are_not_held_against_a_job() -> None:
    assert foreign_reason(job("1"), 1001, "default") is None


def test_namespace_must_be_the_jobs_or_its_recorded_ids() -> None:
    assert foreign_reason(job("team/x", namespace="team"), 0, "team") is None
    assert "namespace 'evil'" in (foreign_reason(job("evil/x", namespace="evil"), 0, "team")
                                  or "")
    # The recorded back-end id names the namespace the job was created in.
    assert foreign_reason(job("ns2/x", namespace="ns2"), 0, "team", "ns2/x") is None


def test_pick_ignores_a_forgery_and_logs_it_once(caplog: pytest.LogCaptureFixture) -> None:
    check = OwnerCheck()
    mine, forged = job("10", 1001), job("11", 1002)
    for _ in range(3):
        assert check.pick("slurm", object(), 1, UID, ALICE, "default", [forged, mine]) is mine
        assert check.pick("slurm", object(), 1, UID, ALICE, "default", [forged]) is None
    assert [r.levelname for r in caplog.records if "foreign back-end job" in r.getMessage()
            ] == ["WARNING"]


def test_pick_prefers_the_recorded_id_and_asks_the_back_end_for_its_uid() -> None:
    check = OwnerCheck()
    a, b = job("10", 999), job("11", 999)
    assert check.pick("flux", DaemonRuns(), 1, UID, ALICE, "default", [a, b], "11") is b
    assert check.pick("flux", object(), 1, UID, ALICE, "default", [a, b], "11") is None


# ------------------------------------------------------------- the engine uses it


class Carrying(FakeBackend):
    """A back end whose lookup finds the given jobs."""

    def __init__(self, found: list[BackendJob]) -> None:
        super().__init__(inventory())
        self.found = found

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        return [bj for bj in self.found if bj.job_uid in job_uids]


def _engine(tmp_path: Path, backend: FakeBackend) -> Engine:
    return Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
                  EngineSettings(default_backend="slurm", placement={"slurm": "none"},
                                 lost_after_snapshots=2, lost_after_seconds=0.0))


async def test_a_forged_job_in_snapshots_does_not_make_the_real_one_lost(
        tmp_path: Path) -> None:
    e = _engine(tmp_path, Carrying([]))
    rec = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    rec = e.store.get(rec.id)
    assert rec.backend_id == "101"
    real = BackendJob(backend_id="101", job_uid=rec.uid, state=BackendState.RUNNING,
                      owner_uid=ALICE.uid)
    forged = BackendJob(backend_id="999", job_uid=rec.uid, state=BackendState.FAILED,
                        owner_uid=1002)
    later = time.time() + 60
    for at in (later, later + 1, later + 2):
        e.apply_status("slurm", StatusBatch((real, forged), complete=True, at=at))
    assert e.store.get(rec.id).state is JobState.RUNNING
    # Without its own job, the forgery alone does not stand in for it: the job is lost.
    for at in (later + 3, later + 4):
        e.apply_status("slurm", StatusBatch((forged,), complete=True, at=at))
    assert (e.store.get(rec.id).state, e.store.get(rec.id).reason) == (
        JobState.FAILED, "BackendLost")


async def test_adoption_after_a_crash_skips_a_forgery_and_submits(tmp_path: Path) -> None:
    backend = Carrying([])
    e = _engine(tmp_path, backend)
    rec = e.admit(trainjob(nodes=1), ALICE)
    e.store.update(rec.id, attempts=1, submitting_since=time.time() - 3600)
    backend.found.append(BackendJob(backend_id="999", job_uid=rec.uid,
                                    state=BackendState.COMPLETED, exit_code=0,
                                    owner_uid=1002))
    await settle(e)
    after = e.store.get(rec.id)
    assert after.backend_id == "101" and len(backend.submitted) == 1
    assert after.state is JobState.SUBMITTED
