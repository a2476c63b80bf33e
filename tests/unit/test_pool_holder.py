"""pool_adapter.holder: the holder's script (run for real under /bin/sh) and what a
holder and its JobSet mean together (compose: a table of cases and properties)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendJob, BackendState
from pool_adapter.holder import (
    ALLOCATION_ENDED,
    JOBSET_DELETED,
    SIGNAL_FAILURE,
    SIGNAL_SUCCESS,
    Do,
    JobSetView,
    compose,
    holder_script,
)

ID = "ns/job@42"
S = BackendState


def holder(state: BackendState, native: str = "", reason: str | None = None) -> BackendJob:
    return BackendJob("42", "uid-1", state, native_state=native or state.value,
                      reason=reason, nodes=("node1", "node2"), owner_uid=1001,
                      start_time=100.0)


def jobset(state: BackendState, suspended: bool = False, pinned: str | None = None
           ) -> JobSetView:
    return JobSetView(BackendJob("ns/job", "uid-1", state, namespace="ns",
                                 exit_code=0 if state is S.COMPLETED else None),
                      suspended, pinned)


@pytest.mark.parametrize("sig, code", [(SIGNAL_SUCCESS, 0), (SIGNAL_FAILURE, 1),
                                       ("TERM", 143)])
def test_the_holder_script_waits_until_signalled_and_exits_as_the_signal_says(
        tmp_path: Path, sig: str, code: int) -> None:
    script = tmp_path / "holder.sh"
    script.write_text(holder_script("ns/job", "0f1e-uid"))
    proc = subprocess.Popen(["/bin/sh", str(script)])
    try:
        # Wait until the shell is in its loop (it has started its sleep): the traps are
        # set by then (a signal before that would end the shell by its default action).
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        deadline = time.monotonic() + 10
        while not children.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(getattr(signal, f"SIG{sig}"))
        assert proc.wait(timeout=10) == code
    finally:
        proc.kill()


@pytest.mark.parametrize("jobset_id, uid", [("ns/a;b", "u"), ("ns/a", "u$(x)"),
                                            ("ns/a\nb", "u"), ("/a", "u")])
def test_the_holder_script_takes_only_names_and_uids(jobset_id: str, uid: str) -> None:
    with pytest.raises(ValueError):
        holder_script(jobset_id, uid)


def test_a_waiting_holder_is_the_jobs_state_with_slurms_reason() -> None:
    c = compose(ID, holder(S.PENDING, reason="Resources"), jobset(S.SUSPENDED, True), True)
    assert c.job is not None and c.job.state is S.PENDING and c.job.reason == "Resources"
    assert c.job.backend_id == ID and c.job.namespace == "ns" and c.action is Do.NOTHING


def test_a_running_holder_pins_its_jobset_then_the_job_runs() -> None:
    c = compose(ID, holder(S.RUNNING), jobset(S.SUSPENDED, True), True)
    assert c.action is Do.PIN and c.job is not None and c.job.state is S.PENDING
    c = compose(ID, holder(S.RUNNING), jobset(S.RUNNING, False, "42"), True)
    assert c.action is Do.NOTHING and c.job is not None and c.job.state is S.RUNNING
    assert c.job.nodes == ("node1", "node2")


def test_a_jobset_pinned_to_an_earlier_allocation_is_pinned_again() -> None:
    c = compose(ID, holder(S.RUNNING), jobset(S.RUNNING, False, "41"), True)
    assert c.action is Do.PIN


@pytest.mark.parametrize("js_state, sig", [(S.COMPLETED, SIGNAL_SUCCESS),
                                           (S.FAILED, SIGNAL_FAILURE)])
def test_a_finished_jobset_ends_its_holder_as_it_ended(js_state: BackendState,
                                                       sig: str) -> None:
    c = compose(ID, holder(S.RUNNING), jobset(js_state, False, "42"), True)
    assert c.action is Do.END_HOLDER and c.signal == sig
    assert c.job is not None and c.job.state is js_state and c.job.owner_uid == 1001


@pytest.mark.parametrize("ended, state", [(S.CANCELLED, S.FAILED), (S.TIMEOUT, S.TIMEOUT),
                                          (S.FAILED, S.FAILED)])
def test_a_holder_ending_first_deletes_the_jobset_and_fails_the_job(
        ended: BackendState, state: BackendState) -> None:
    c = compose(ID, holder(ended), jobset(S.RUNNING, False, "42"), True)
    assert c.action is Do.DELETE_JOBSET and c.job is not None
    assert c.job.state is state and c.job.failure_reason == ALLOCATION_ENDED
    assert c.job.detail is not None and f"Slurm job 42 ended {ended.value}" in c.job.detail


def test_a_deleted_jobset_cancels_its_living_holder() -> None:
    c = compose(ID, holder(S.RUNNING), None, True)
    assert c.action is Do.CANCEL_HOLDER and c.job is not None
    assert c.job.state is S.CANCELLED and c.job.reason == JOBSET_DELETED
    # ... but not before the JobSet watch has listed once.
    assert compose(ID, holder(S.RUNNING), None, False) == compose(ID, None, None, True)


def test_a_holder_requeued_or_held_unpins_its_jobset() -> None:
    c = compose(ID, holder(S.PENDING), jobset(S.RUNNING, False, "42"), True)
    assert c.action is Do.UNPIN


def test_without_a_holder_only_a_finished_jobset_is_reported() -> None:
    assert compose(ID, None, jobset(S.SUSPENDED, True), True).job is None
    done = compose(ID, None, jobset(S.COMPLETED, False, "42"), True)
    assert done.job is not None and done.job.state is S.COMPLETED and done.action is Do.NOTHING
    # Before Slurm has listed since a start, the holder's id (part of the job's) is not
    # known: nothing is reported (the engine would see another id than it recorded).
    assert compose(ID, None, jobset(S.COMPLETED, False, "42"), False).job is None


states = st.sampled_from(list(BackendState))


@given(h=st.none() | states, j=st.none() | states, suspended=st.booleans(),
       pinned=st.sampled_from([None, "41", "42"]), synced=st.booleans())
def test_compose_invariants(h: BackendState | None, j: BackendState | None, suspended: bool,
                            pinned: str | None, synced: bool) -> None:
    c = compose(ID, holder(h) if h else None, jobset(j, suspended, pinned) if j else None,
                synced)
    if c.job is not None:
        assert c.job.backend_id == ID
    if c.action is Do.PIN:  # only onto a running allocation
        assert h is S.RUNNING and j is not None and not j.finished
    if c.action is Do.END_HOLDER:  # only after the JobSet ended, with its outcome
        assert j is not None and j.finished and h is S.RUNNING
        assert (c.signal == SIGNAL_SUCCESS) == (j is S.COMPLETED)
    if c.action is Do.DELETE_JOBSET:
        assert h is not None and h.finished and j is not None and not j.finished
    if c.action is Do.CANCEL_HOLDER:  # the JobSet is gone, or ended while it waits
        assert h is not None and not h.finished
        assert (synced and j is None) or (j is not None and j.finished and h is not S.RUNNING)
    if c.action is Do.UNPIN:  # never while an allocation runs
        assert h is not S.RUNNING and j is not None and not j.finished
        assert h is not None or synced
    if h is not None and h.finished and j is not None and j.finished:
        assert c.job is not None and c.job.state is j  # the JobSet's outcome is the job's
