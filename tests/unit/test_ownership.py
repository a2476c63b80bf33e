"""A back-end job is a stored job's only when key AND owner match (bridge.ownership)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendJob, BackendState, Owner
from bridge.ownership import OwnerCheck, foreign_reason

ALICE = Owner(uid=1001, gid=1001, user="alice")
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


def test_pick_ignores_a_forgery_and_logs_it_once(capsys: pytest.CaptureFixture[str]) -> None:
    check = OwnerCheck()
    mine, forged = job("10", 1001), job("11", 1002)
    for _ in range(3):
        assert check.pick("slurm", object(), 1, UID, ALICE, "default", [forged, mine]) is mine
        assert check.pick("slurm", object(), 1, UID, ALICE, "default", [forged]) is None
    assert capsys.readouterr().out.count("foreign back-end job") == 1


def test_pick_prefers_the_recorded_id_and_asks_the_back_end_for_its_uid() -> None:
    check = OwnerCheck()
    a, b = job("10", 999), job("11", 999)
    assert check.pick("flux", DaemonRuns(), 1, UID, ALICE, "default", [a, b], "11") is b
    assert check.pick("flux", object(), 1, UID, ALICE, "default", [a, b], "11") is None
