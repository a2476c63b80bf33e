"""flux_adapter.events: RFC 21 eventlogs and job-list records to bridge states.

The eventlogs in tests/unit/fixtures/flux/eventlogs/ are written in the RFC 18/21 format
(one JSON event per line), with the events flux-core posts for each outcome.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendState
from flux_adapter.events import (
    JobHistory,
    apply_event,
    decode_wait_status,
    parse_eventlog,
    replay,
    status_from_history,
    status_from_list,
    to_backend_job,
)

FIXTURES = Path(__file__).parent / "fixtures" / "flux"


def eventlog(name: str) -> list[dict[str, Any]]:
    return parse_eventlog((FIXTURES / "eventlogs" / f"{name}.eventlog").read_text())


@pytest.mark.parametrize(("name", "state", "native", "exit_code", "signal", "reason"), [
    ("completed", BackendState.COMPLETED, "COMPLETED", 0, None, None),
    ("exit3", BackendState.FAILED, "FAILED", 3, None, None),
    ("signaled", BackendState.FAILED, "FAILED", 137, 9, None),
    ("cancelled-running", BackendState.CANCELLED, "CANCELED", 143, 15,
     "cancel: cancelled through hpc-bridge"),
    ("cancelled-pending", BackendState.CANCELLED, "CANCELED", None, None, "cancel"),
    ("timeout", BackendState.TIMEOUT, "TIMEOUT", 137, 9,
     "timeout: resource allocation expired"),
    ("unsatisfiable", BackendState.FAILED, "FAILED", None, None,
     "alloc: unsatisfiable request"),
    ("exec-failed", BackendState.FAILED, "FAILED", 127, None,
     "exec: task 0 (host node2): start failed: /opt/bin/mpi-launch: No such file or "
     "directory"),
    ("nonfatal-exception", BackendState.COMPLETED, "COMPLETED", 0, None, None),
    ("pre-validate-format", BackendState.FAILED, "FAILED", 1, None, None),
])
def test_final_states(name: str, state: BackendState, native: str, exit_code: int | None,
                      signal: int | None, reason: str | None) -> None:
    status = status_from_history(replay(eventlog(name)))
    assert status.state is state
    assert status.native_state == native
    assert status.exit_code == exit_code
    assert status.signal == signal
    assert status.reason == reason
    assert status.end_time is not None


def test_completed_times_and_owner() -> None:
    h = replay(eventlog("completed"))
    assert h.state == "INACTIVE"
    assert h.userid == 1001
    status = status_from_history(h)
    # RUN state begins with alloc (resources held); the end is the finish event.
    assert status.start_time == pytest.approx(1765000000.2405)
    assert status.end_time == pytest.approx(1765000031.5009)


@pytest.mark.parametrize(("name", "reason"), [("held", "Held"), ("dependency", "Dependency")])
def test_pending_states(name: str, reason: str) -> None:
    status = status_from_history(replay(eventlog(name)))
    assert status.state is BackendState.PENDING
    assert status.reason == reason
    assert status.exit_code is None


def test_every_prefix_moves_forward_and_cleanup_is_still_running() -> None:
    """Replaying an eventlog one event at a time gives PENDING*, RUNNING*, then final;
    a job in CLEANUP (finish seen, clean not yet) is RUNNING with its end time, like
    Slurm's COMPLETING."""
    events = eventlog("cancelled-running")
    seen = []
    h = JobHistory()
    for event in events:
        h = apply_event(h, event)
        seen.append(status_from_history(h))
    progress = [s.progress for s in seen]
    assert progress == sorted(progress)
    assert [s.state for s in seen[:4]] == [BackendState.PENDING] * 4
    in_cleanup = seen[6]  # the cancel exception
    assert in_cleanup.native_state == "CLEANUP"
    assert in_cleanup.state is BackendState.RUNNING
    assert in_cleanup.end_time == pytest.approx(1765000320.0)
    assert seen[-1].state is BackendState.CANCELLED


def test_running() -> None:
    status = status_from_history(replay(eventlog("running")))
    assert (status.state, status.native_state) == (BackendState.RUNNING, "RUN")
    assert status.start_time == pytest.approx(1765001100.4)
    assert status.end_time is None


def test_invalidated_job_fails() -> None:
    status = status_from_history(replay(eventlog("invalidated")))
    assert status.state is BackendState.FAILED
    assert status.reason is not None and "invalidate" in status.reason


def test_replay_is_incremental() -> None:
    events = eventlog("timeout")
    whole = replay(events)
    assert replay(events[5:], replay(events[:5])) == whole


def test_a_second_fatal_exception_does_not_change_the_result() -> None:
    """The end event (first to reach CLEANUP) decides, as the job manager decides."""
    events = eventlog("timeout")
    late_cancel = {"timestamp": 1765000561.0, "name": "exception",
                   "context": {"type": "cancel", "severity": 0, "note": ""}}
    events.insert(7, late_cancel)
    assert status_from_history(replay(events)).state is BackendState.TIMEOUT


def test_unknown_and_malformed_events_change_nothing() -> None:
    h = replay(eventlog("running"))
    assert apply_event(h, {"name": "debug.free-request", "timestamp": 1.0}) == h
    assert apply_event(h, {"name": "start", "timestamp": 2.0}) == h  # a late start
    assert replay([{"no": "name"}, "junk"], h) == h  # type: ignore[list-item]


def test_parse_eventlog_rejects_non_events() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_eventlog('{"name":"submit","timestamp":1}\n[1,2]\n')


@pytest.mark.parametrize(("status", "expected"), [
    (0, (0, None)), (256, (1, None)), (768, (3, None)), (0x7F00, (127, None)),
    (9, (137, 9)), (15, (143, 15)), (0x86, (134, 6)),  # SIGABRT with a core dump
])
def test_decode_wait_status(status: int, expected: tuple[int, int | None]) -> None:
    assert decode_wait_status(status) == expected


@given(st.integers(min_value=0, max_value=255), st.integers(min_value=1, max_value=64))
def test_decode_wait_status_roundtrip(code: int, sig: int) -> None:
    assert decode_wait_status(code << 8) == (code, None)
    if sig != 0x7F:
        assert decode_wait_status(sig) == (128 + sig, sig)


def job_list() -> dict[str, dict[str, Any]]:
    data = json.loads((FIXTURES / "joblist.json").read_text())
    return {j["name"].rpartition("-uid-")[2] if "-uid-" in j["name"] else j["name"]: j
            for j in data["jobs"]}


@pytest.mark.parametrize(("key", "state", "native", "exit_code", "reason"), [
    ("pending", BackendState.PENDING, "SCHED", None, None),
    ("held", BackendState.PENDING, "SCHED", None, "Held"),
    ("running", BackendState.RUNNING, "RUN", None, None),
    ("cleanup", BackendState.RUNNING, "CLEANUP", None, None),
    ("completed", BackendState.COMPLETED, "COMPLETED", 0, None),
    ("failed", BackendState.FAILED, "FAILED", 3, None),
    ("cancelled", BackendState.CANCELLED, "CANCELED", None, "cancel"),
    ("timeout", BackendState.TIMEOUT, "TIMEOUT", 137, "timeout: resource allocation expired"),
])
def test_status_from_job_list(key: str, state: BackendState, native: str,
                              exit_code: int | None, reason: str | None) -> None:
    status = status_from_list(job_list()[key])
    assert (status.state, status.native_state, status.exit_code, status.reason) == (
        state, native, exit_code, reason)


def test_job_list_times() -> None:
    jobs = job_list()
    assert status_from_list(jobs["running"]).start_time == pytest.approx(1765000001.5)
    assert status_from_list(jobs["running"]).end_time is None
    assert status_from_list(jobs["cleanup"]).end_time == pytest.approx(1765000031.0)
    assert status_from_list(jobs["timeout"]).end_time == pytest.approx(1765000560.4)
    assert status_from_list({"id": 1, "state": 999}).state is BackendState.UNKNOWN


def test_event_and_list_views_agree() -> None:
    """The same outcome read from the eventlog and from job-list gives one status."""
    pairs = [("completed", "completed"), ("exit3", "failed"), ("timeout", "timeout")]
    jobs = job_list()
    for log_name, key in pairs:
        a = status_from_history(replay(eventlog(log_name)))
        b = status_from_list(jobs[key])
        assert (a.state, a.native_state, a.exit_code) == (b.state, b.native_state,
                                                          b.exit_code)


def test_to_backend_job_copies_stdout_to_stderr() -> None:
    status = status_from_history(replay(eventlog("exit3")))
    job = to_backend_job(42, "uid-1", status, nodes=("node1",), stdout_path="/o",
                         owner_uid=1001, queue="batch")
    assert job.backend_id == "42"
    assert job.stderr_path == "/o"
    assert (job.exit_code, job.nodes, job.queue, job.owner_uid) == (3, ("node1",), "batch",
                                                                    1001)


def test_flux_reasons_reach_the_job_detail() -> None:
    """The exception Flux raised (its type and note) is the finished job's ``detail``,
    which the engine appends to the message: not just 'exit code 127'."""
    events = [{"name": "submit", "timestamp": 1.0, "context": {"userid": 1001}},
              {"name": "alloc", "timestamp": 2.0}, {"name": "start", "timestamp": 2.1},
              {"name": "exception", "timestamp": 2.2, "context": {
                  "type": "exec", "severity": 0,
                  "note": "task 0 (host node1): start failed: /x: No such file or directory"}},
              {"name": "finish", "timestamp": 2.3, "context": {"status": 32512}},
              {"name": "clean", "timestamp": 2.4}]
    job = to_backend_job(7, "u", status_from_history(replay(events)))
    assert job.exit_code == 127
    assert job.detail == ("exec: task 0 (host node1): start failed: /x: No such file or "
                          "directory")
    listed = to_backend_job(7, "u", status_from_list({
        "state": 64, "result": 2, "exception_occurred": True, "exception_severity": 0,
        "exception_type": "alloc", "exception_note": "alloc denied: unsatisfiable"}))
    assert listed.detail == "alloc: alloc denied: unsatisfiable"
    running = to_backend_job(7, "u", status_from_history(replay(events[:3])))
    assert running.detail is None
