"""flux_adapter.backend: FluxBackend against a stand-in Flux instance (a fake
:class:`flux_adapter.client.FluxConnection`; flux-core is not installable here).

Covered: settings, the daemon living without flux-python, submit (in-process and as the
owner), error classification, lookup by uid with jobspec confirmation, the event-driven
status stream (journal backlog, live events, snapshots, reconnects, the polling fallback
for guests), cancel, inventory and read_log.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import pwd
import queue
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import (
    Backend,
    BackendJob,
    BackendRejected,
    BackendState,
    BackendUnavailable,
    Owner,
    StatusBatch,
    SubmitRequest,
)
from bridge.output import OutputRefused
from bridge.scheduling import SchedulingOptions
from flux_adapter import backend as backend_mod
from flux_adapter.backend import FluxBackend, create
from flux_adapter.client import RunResult
from flux_adapter.events import parse_eventlog
from flux_adapter.jobspec import parse_job_id
from tests.unit.builders import submit_request, trainjob

FIXTURES = Path(__file__).parent / "fixtures" / "flux"
PW = pwd.getpwuid(os.geteuid())
ME = Owner(uid=PW.pw_uid, gid=PW.pw_gid, user=PW.pw_name)
OTHER = Owner(uid=PW.pw_uid + 4242, gid=PW.pw_gid, user="someone")


def eventlog(name: str) -> list[dict[str, Any]]:
    return parse_eventlog((FIXTURES / "eventlogs" / f"{name}.eventlog").read_text())


def r_doc(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "R" / f"{name}.json").read_text())
    return data


def spec_for(uid: str, name: str = "train", output: str = "/out/o-{{id.dec}}.log"
             ) -> dict[str, Any]:
    return {"attributes": {
        "user": {"hpc_bridge_uid": uid},
        "system": {"job": {"name": f"{name}.hpc-bridge-{uid}"}, "cwd": "/home/x",
                   "shell": {"options": {"output": {"stdout": {"type": "file",
                                                               "path": output}}}}}}}


class World:
    """The state of a stand-in Flux instance, shared by every connection."""

    def __init__(self) -> None:
        self.connects = 0
        self.connect_error: BaseException | None = None
        self.submitted: list[Mapping[str, Any]] = []
        self.submit_error: OSError | None = None
        self.next_id = 5000
        self.cancelled: list[tuple[int, str]] = []
        self.cancel_error: OSError | None = None
        self.listing: list[dict[str, Any]] = []
        self.list_calls: list[float] = []
        self.list_error: OSError | None = None
        self.specs: dict[int, dict[str, Any]] = {}
        self.spec_calls: list[list[int]] = []
        self.journal_items: queue.Queue[Any] = queue.Queue()
        self.journal_opens = 0
        self.resources: dict[str, Any] = {}
        self.config: dict[str, Any] = {}


class FakeConn:
    def __init__(self, world: World) -> None:
        self.world = world
        self.closed = False

    def version(self) -> str:
        return "0.88.0"

    def instance_owner(self) -> int:
        return os.geteuid()

    def submit(self, jobspec: Mapping[str, Any]) -> int:
        if self.world.submit_error is not None:
            raise self.world.submit_error
        self.world.submitted.append(jobspec)
        self.world.next_id += 1
        return self.world.next_id

    def cancel(self, job_id: int, reason: str) -> None:
        if self.world.cancel_error is not None:
            raise self.world.cancel_error
        self.world.cancelled.append((job_id, reason))

    def list_jobs(self, since: float = 0.0) -> list[dict[str, Any]]:
        self.world.list_calls.append(since)
        if self.world.list_error is not None:
            raise self.world.list_error
        return [dict(e) for e in self.world.listing]

    def jobspecs(self, job_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        self.world.spec_calls.append(list(job_ids))
        return {j: self.world.specs[j] for j in job_ids if j in self.world.specs}

    def resource_status(self) -> dict[str, Any]:
        return self.world.resources

    def config(self) -> dict[str, Any]:
        return self.world.config

    def journal(self, stop: threading.Event) -> Iterator[dict[str, Any]]:
        self.world.journal_opens += 1
        while not stop.is_set():
            try:
                item = self.world.journal_items.get(timeout=0.05)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            if item is None:
                return
            yield item

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
async def backend(world: World) -> AsyncIterator[FluxBackend]:
    def connect() -> FakeConn:
        world.connects += 1
        if world.connect_error is not None:
            raise world.connect_error
        return FakeConn(world)

    b = FluxBackend("flux", connect=connect, mpi_launch="/opt/mpi-launch",
                    reconcile_interval=0.3, request_timeout=2.0)
    yield b
    await b.close()


def request(owner: Owner = ME, uid: str = "uid-1", runtime: str = "plain",
            options: SchedulingOptions | None = None) -> SubmitRequest:
    job = trainjob(runtime, namespace="a", uid=uid, command=["python", "t.py"], nodes=2)
    return submit_request(job, options, owner=owner, uid=uid, job_id=1)


async def next_batch(stream: AsyncIterator[StatusBatch], wait: float = 5.0) -> StatusBatch:
    return await asyncio.wait_for(anext(stream), wait)


async def until(stream: AsyncIterator[StatusBatch], uid: str, native: str,
                complete: bool = False) -> BackendJob:
    """The job ``uid`` from the first batch (of the given kind) that shows it in Flux
    state ``native`` (events may arrive in one batch or several)."""
    for _ in range(20):
        batch = await next_batch(stream)
        for job in batch.jobs:
            if job.job_uid == uid and job.native_state == native and (
                    batch.complete == complete):
                return job
    raise AssertionError(f"{uid} never reached {native}")


# --------------------------------------------------------------------------- settings


def test_create_and_settings() -> None:
    b = create("f", {"uri": "local:///run/flux/local", "queue": "batch",
                     "request_timeout": "5", "reconcile_interval": 30,
                     "flux_command": "/usr/bin/flux", "mpi_launch": "/x/mpi-launch"})
    assert isinstance(b, Backend)
    assert (b.uri, b.queue, b.request_timeout, b.reconcile_interval, b.flux_command,
            b.mpi_launch, b.submit_as) == ("local:///run/flux/local", "batch", 5.0, 30.0,
                                           "/usr/bin/flux", "/x/mpi-launch", "owner")
    with pytest.raises(ValueError, match="unknown settings rest_url"):
        create("f", {"rest_url": "x"})
    with pytest.raises(ValueError, match="request_timeout: must be a positive number"):
        create("f", {"request_timeout": "soon"})
    with pytest.raises(ValueError, match="positive"):
        create("f", {"reconcile_interval": 0})
    with pytest.raises(ValueError, match="submit_as"):
        FluxBackend("f", submit_as="root")


def test_daemon_mode_as_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(ValueError, match="every job as root"):
        create("f", {"submit_as": "daemon"})


def test_create_does_not_import_flux() -> None:
    """In a fresh interpreter: in this one an earlier test (an integration test of the
    same session, say) may have imported flux already."""
    import subprocess
    import sys

    code = ("import sys; from flux_adapter.backend import create; create('f', {}); "
            "print('flux' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", out.stderr


# --------------------------------------------------------------------------- no flux-python


async def test_the_daemon_lives_without_flux_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """No flux module (hidden here: the test bed's venv has flux-python): every call is
    BackendUnavailable with the fix, and the status stream yields nothing and raises
    nothing."""
    for name in ("flux", "flux.job", "flux.constants"):
        monkeypatch.setitem(sys.modules, name, None)
    b = create("flux", {"reconcile_interval": 0.1})
    try:
        for call in (b.start(), b.submit(request()), b.lookup(["u"]), b.inventory(),
                     b.cancel("1", ME)):
            with pytest.raises(BackendUnavailable, match="flux-python is not installed"):
                await call
        stream = b.watch(0.05)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(stream), 0.5)
        await stream.aclose()
    finally:
        await b.close()


async def test_start(backend: FluxBackend, world: World, caplog: pytest.LogCaptureFixture
                     ) -> None:
    caplog.set_level("INFO")
    await backend.start()
    assert "flux-core 0.88.0" in caplog.text

    def unreachable() -> FakeConn:
        raise BackendUnavailable("the Flux broker at x is unreachable: refused")

    backend2 = FluxBackend("g", connect=unreachable)
    with pytest.raises(BackendUnavailable, match="unreachable"):
        await backend2.start()
    await backend2.close()


# --------------------------------------------------------------------------- submit


async def test_submit_in_process(backend: FluxBackend, world: World) -> None:
    job_id = await backend.submit(request(runtime="mpi-distributed"))
    assert job_id == "5001"
    spec = world.submitted[0]
    assert spec["attributes"]["user"]["hpc_bridge_uid"] == "uid-1"
    assert spec["tasks"][0]["command"][0] == "/opt/mpi-launch"
    assert spec["attributes"]["system"]["cwd"] == PW.pw_dir


async def test_submit_refusals_reach_the_engine_as_rejected(backend: FluxBackend,
                                                            world: World) -> None:
    with pytest.raises(BackendRejected, match="--qos"):
        await backend.submit(request(options=SchedulingOptions(qos="high")))
    assert world.submitted == []
    world.submit_error = OSError(errno.EINVAL, "invalid queue 'nope' specified")
    with pytest.raises(BackendRejected, match="invalid queue"):
        await backend.submit(request())


async def test_submit_connection_loss_is_retried_on_a_new_connection(
        backend: FluxBackend, world: World) -> None:
    world.submit_error = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    with pytest.raises(BackendUnavailable, match="reset"):
        await backend.submit(request())
    world.submit_error = None
    assert await backend.submit(request()) == "5001"
    assert world.connects == 2  # the broken handle was dropped
    world.submit_error = TimeoutError(errno.ETIMEDOUT, "Connection timed out")
    with pytest.raises(BackendUnavailable, match="no answer"):
        await backend.submit(request())


async def test_submit_as_another_owner_runs_flux_job_submit_as_them(
        backend: FluxBackend, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Owner, list[str], dict[str, str], bytes]] = []

    async def fake_run(owner: Owner, argv: Sequence[str], *, env: Mapping[str, str],
                       stdin: bytes = b"", time_limit: float = 30.0) -> RunResult:
        calls.append((owner, list(argv), dict(env), stdin))
        if b"FAIL" in stdin:
            return RunResult(1, "", "flux-job: Connection refused\n")
        return RunResult(0, "fA1b2C3\n", "")

    monkeypatch.setattr(backend_mod, "run_flux_as", fake_run)
    job_id = await backend.submit(request(owner=OTHER))
    assert job_id == str(parse_job_id("fA1b2C3"))
    owner, argv, env, stdin = calls[0]
    assert (owner, argv) == (OTHER, ["flux", "job", "submit"])
    assert json.loads(stdin)["attributes"]["user"]["hpc_bridge_uid"] == "uid-1"
    assert env["FLUX_F58_FORCE_ASCII"] == "1"
    assert world.submitted == []  # not through the daemon's own connection
    with pytest.raises(BackendUnavailable, match="Connection refused"):
        await backend.submit(request(owner=OTHER, options=SchedulingOptions(
            job_name="FAIL")))


async def test_submit_as_daemon_runs_every_job_in_process(world: World) -> None:
    b = FluxBackend("f", submit_as="daemon", connect=lambda: FakeConn(world))
    try:
        assert await b.submit(request(owner=OTHER)) == "5001"
    finally:
        await b.close()


# --------------------------------------------------------------------------- lookup


def listed(job_id: int, uid: str, state: int = 16, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "userid": 1001, "name": f"train.hpc-bridge-{uid}", "state": state,
            **extra}


async def test_lookup_one_query_confirmed_by_jobspec(backend: FluxBackend, world: World
                                                     ) -> None:
    world.listing = [
        listed(10, "uid-a", nodelist="node[1-2]", t_run=5.0, queue="batch"),
        listed(11, "uid-b", 64, result=1, waitstatus=0),
        listed(12, "uid-b", 16),  # a second job for uid-b, still running: preferred
        listed(13, "uid-forged"),
        {"id": 14, "userid": 5, "name": "not-ours", "state": 16},
        listed(15, "uid-named-only"),  # a name with the marker, a jobspec without the uid
    ]
    world.specs = {10: spec_for("uid-a"), 11: spec_for("uid-b"), 12: spec_for("uid-b"),
                   13: spec_for("someone-else"), 15: {"attributes": {"system": {}}}}
    jobs = await backend.lookup(["uid-a", "uid-b", "uid-forged", "uid-missing",
                                 "uid-named-only"])
    found = {j.job_uid: j for j in jobs}
    assert len(jobs) == 2 and set(found) == {"uid-a", "uid-b"}
    a = found["uid-a"]
    assert (a.backend_id, a.state, a.nodes, a.queue, a.owner_uid) == (
        "10", BackendState.RUNNING, ("node1", "node2"), "batch", 1001)
    assert a.stdout_path == a.stderr_path == "/out/o-10.log"
    assert found["uid-b"].backend_id == "12"
    assert world.list_calls == [0.0]
    assert world.spec_calls == [[10, 11, 12, 13, 15]]  # only names carrying a uid
    await backend.lookup(["uid-a"])
    assert world.spec_calls == [[10, 11, 12, 13, 15]]  # cached
    assert await backend.lookup([]) == []


async def test_lookup_reports_each_owners_job_carrying_a_uid(backend: FluxBackend,
                                                              world: World) -> None:
    """Another user's job carrying our uid is not folded into ours: both are reported,
    each with its userid, for the engine to keep its own (bridge.ownership)."""
    world.listing = [listed(20, "uid-a"), listed(21, "uid-a", userid=1002)]
    world.specs = {20: spec_for("uid-a"), 21: spec_for("uid-a")}
    jobs = await backend.lookup(["uid-a"])
    assert sorted((j.backend_id, j.owner_uid) for j in jobs) == [("20", 1001), ("21", 1002)]
    assert backend.world_uid(ME) == ME.uid  # submit_as = "owner"


async def test_lookup_errors(backend: FluxBackend, world: World) -> None:
    world.list_error = OSError(errno.ENOSYS, "job-list module not loaded")
    with pytest.raises(BackendUnavailable, match="job-list"):
        await backend.lookup(["x"])


# --------------------------------------------------------------------------- watch


def journal_response(job_id: int, events: list[dict[str, Any]], jobspec: Any = None,
                     r: Any = None) -> dict[str, Any]:
    resp: dict[str, Any] = {"id": job_id, "events": events}
    if jobspec is not None:
        resp["jobspec"] = jobspec
    if r is not None:
        resp["R"] = r
    return resp


SENTINEL = {"id": -1, "events": []}


async def test_watch_event_driven(backend: FluxBackend, world: World) -> None:
    running = eventlog("running")
    world.listing = [listed(7, "uid-done", 64, result=2, waitstatus=768, nodelist="node9")]
    world.specs = {7: spec_for("uid-done")}
    # backlog: one of ours running, one foreign job, then the sentinel
    world.journal_items.put(journal_response(1, running, spec_for("uid-run"),
                                             r_doc("job-2nodes")))
    world.journal_items.put(journal_response(2, running[:3], {"attributes": {"system": {}}}))
    world.journal_items.put(SENTINEL)
    stream = backend.watch(0.05)
    first = await next_batch(stream)
    assert first.complete
    by_uid = {j.job_uid: j for j in first.jobs}
    assert set(by_uid) == {"uid-run", "uid-done"}
    assert by_uid["uid-run"].state is BackendState.RUNNING
    assert by_uid["uid-run"].nodes == ("node2", "node3")
    assert by_uid["uid-run"].owner_uid == 1001
    assert (by_uid["uid-done"].state, by_uid["uid-done"].exit_code) == (BackendState.FAILED, 3)
    assert world.list_calls == [0.0]

    # live: events of the foreign job are ignored; ours are batched
    world.journal_items.put(journal_response(2, running[3:]))
    done = eventlog("completed")
    world.journal_items.put(journal_response(3, done[:1], spec_for("uid-new")))
    job = await until(stream, "uid-new", "NEW")
    assert job.state is BackendState.PENDING
    world.journal_items.put(journal_response(3, done[1:5], r=r_doc("job-2nodes")))
    world.journal_items.put(journal_response(3, done[5:9]))
    job = await until(stream, "uid-new", "CLEANUP")
    assert (job.state, job.nodes) == (BackendState.RUNNING, ("node2", "node3"))
    world.journal_items.put(journal_response(3, done[9:]))
    job = await until(stream, "uid-new", "COMPLETED")
    assert (job.state, job.exit_code, job.stdout_path) == (BackendState.COMPLETED, 0,
                                                           "/out/o-3.log")

    # the periodic snapshot: job-list since the last one (with a margin), merged
    world.listing = [listed(3, "uid-new", 16)]  # job-list lags behind the journal
    snap = await next_batch(stream)
    while not snap.complete or "uid-new" not in {j.job_uid for j in snap.jobs}:
        snap = await next_batch(stream)
    assert world.list_calls[1] > 0.0
    states = {j.job_uid: j.state for j in snap.jobs}
    assert states["uid-new"] is BackendState.COMPLETED  # the journal is never older
    assert states["uid-run"] is BackendState.RUNNING
    await stream.aclose()


async def test_watch_falls_back_to_polling_for_a_guest(
        backend: FluxBackend, world: World, caplog: pytest.LogCaptureFixture) -> None:
    world.journal_items.put(PermissionError(errno.EPERM, "Operation not permitted"))
    world.listing = [listed(1, "uid-1", 8)]
    stream = backend.watch(0.05)
    batches = [await next_batch(stream) for _ in range(3)]
    assert all(b.complete for b in batches)
    assert batches[0].jobs[0].state is BackendState.PENDING
    assert "instance owner's role" in caplog.text
    assert world.journal_opens == 1
    await stream.aclose()


async def test_watch_reconnects_after_the_journal_breaks(backend: FluxBackend, world: World
                                                         ) -> None:
    world.journal_items.put(SENTINEL)
    stream = backend.watch(0.05)
    assert (await next_batch(stream)).complete
    world.journal_items.put(ConnectionResetError(errno.ECONNRESET, "Connection reset"))
    world.journal_items.put(journal_response(9, eventlog("running"), spec_for("uid-9")))
    world.journal_items.put(SENTINEL)
    world.listing = []
    batch = await next_batch(stream)
    while not batch.jobs:
        batch = await next_batch(stream)
    assert batch.complete and batch.jobs[0].job_uid == "uid-9"
    assert world.journal_opens == 2
    await stream.aclose()


async def test_watch_survives_a_failing_snapshot(backend: FluxBackend, world: World) -> None:
    world.list_error = OSError(errno.ECONNRESET, "reset")
    world.journal_items.put(SENTINEL)
    world.journal_items.put(journal_response(4, eventlog("running"), spec_for("uid-4")))
    stream = backend.watch(0.05)
    batch = await next_batch(stream)
    assert not batch.complete and batch.jobs[0].job_uid == "uid-4"
    world.list_error = None
    snap = await next_batch(stream)
    assert snap.complete and {j.job_uid for j in snap.jobs} == {"uid-4"}
    await stream.aclose()


async def test_close_stops_the_stream(backend: FluxBackend, world: World) -> None:
    world.journal_items.put(SENTINEL)
    stream = backend.watch(0.05)
    await next_batch(stream)
    await backend.close()
    with pytest.raises(StopAsyncIteration):
        while True:
            await next_batch(stream)


# --------------------------------------------------------------------------- cancel


async def test_cancel(backend: FluxBackend, world: World) -> None:
    await backend.cancel("42", ME)
    assert world.cancelled == [(42, "cancelled through hpc-bridge")]
    for error in (OSError(errno.ENOENT, "unknown job id"),
                  OSError(errno.EINVAL, "job is inactive")):
        world.cancel_error = error
        await backend.cancel("42", ME)  # finished or unknown: not an error
    world.cancel_error = OSError(errno.ECONNRESET, "reset")
    with pytest.raises(BackendUnavailable):
        await backend.cancel("42", ME)


async def test_cancel_as_the_owner_when_the_daemon_is_a_guest(
        backend: FluxBackend, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    async def fake_run(owner: Owner, argv: Sequence[str], **kwargs: Any) -> RunResult:
        calls.append(list(argv))
        return RunResult(0, "", "")

    monkeypatch.setattr(backend_mod, "run_flux_as", fake_run)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    world.cancel_error = OSError(errno.EPERM, "guests can only raise exceptions on their own")
    await backend.cancel("42", OTHER)
    assert calls == [["flux", "cancel", "42"]]


# --------------------------------------------------------------------------- inventory


async def test_inventory(backend: FluxBackend, world: World) -> None:
    world.resources = r_doc("sched-status")
    world.config = {"queues": {"gpu": {"requires": ["gpu"]}}}
    inv = await backend.inventory()
    assert [(n.name, n.state, n.partitions) for n in inv.nodes] == [
        ("node1", "IDLE", ()), ("node2", "ALLOCATED", ()), ("node3", "MIXED", ()),
        ("node4", "DOWN", ()), ("gpu1", "MIXED", ("gpu",))]
    assert inv.switches == {}
    world.resources = {"all": {"version": 9}}
    with pytest.raises(BackendUnavailable, match="version"):
        await backend.inventory()


# --------------------------------------------------------------------------- read_log


def bj(path: str | None, owner_uid: int | None) -> BackendJob:
    return BackendJob(backend_id="5", job_uid="u", state=BackendState.RUNNING,
                      stdout_path=path, stderr_path=path, owner_uid=owner_uid)


async def test_read_log(backend: FluxBackend, tmp_path: Path) -> None:
    out = tmp_path / "o.log"
    out.write_bytes(b"hello\nworld\n")
    assert await backend.read_log(bj(str(out), ME.uid), "stdout", 0) == (b"hello\nworld\n",
                                                                          12)
    assert await backend.read_log(bj(str(out), ME.uid), "stderr", 6) == (b"world\n", 12)
    assert await backend.read_log(bj(str(tmp_path / "none"), ME.uid), "stdout", 0) == (b"", 0)
    assert await backend.read_log(bj(None, ME.uid), "stdout", 3) == (b"", 3)
    assert await backend.read_log(bj(str(out), None), "stdout", 0) == (b"", 0)
    link = tmp_path / "link"
    link.symlink_to(out)
    with pytest.raises(OutputRefused, match="symbolic link"):
        await backend.read_log(bj(str(link), ME.uid), "stdout", 0)
    if ME.uid != 0:
        with pytest.raises(OutputRefused, match="belongs to uid"):
            await backend.read_log(bj(str(out), ME.uid + 1), "stdout", 0)
    with pytest.raises(ValueError):
        await backend.read_log(bj(str(out), ME.uid), "both", 0)
