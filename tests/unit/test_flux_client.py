"""flux_adapter.client: the lazy flux-python import and its error messages, the calls
PythonFlux makes (against a stand-in ``flux`` package shaped like flux-python 0.88:
flux-core is not installable here, see /work/shared/TESTBED.md), and ``flux`` commands
run as a job's owner (a stand-in ``flux`` program)."""

from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import subproc
from bridge.backend import BackendRejected, BackendUnavailable, Owner
from bridge.runas import forget_switchers
from flux_adapter import client
from flux_adapter.client import (
    LIST_ATTRS,
    SAFE_PATH,
    PythonFlux,
    classify,
    import_flux,
    is_transient,
    owner_command_env,
    run_flux_as,
)
from tests.requirements import require


def me() -> Owner:
    pw = pwd.getpwuid(os.geteuid())
    return Owner(uid=pw.pw_uid, gid=pw.pw_gid, user=pw.pw_name)


# --------------------------------------------------------------------------- import


def test_missing_flux_python_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flux", None)  # the bed's venv has flux-python
    with pytest.raises(BackendUnavailable, match=r"pip install flux-python==<flux-core"):
        import_flux()


@pytest.mark.parametrize(("error", "match"), [
    (ModuleNotFoundError("No module named 'ply'", name="ply"), "pip install ply"),
    (ModuleNotFoundError("No module named 'flux'", name="flux"), "flux-python is not"),
    (ImportError("libflux-core.so.2: cannot open shared object file: No such file or "
                 "directory"), "libflux-core.so.2 not found"),
    (OSError("cannot load library 'libflux-core.so.2'"), "LD_LIBRARY_PATH"),
    (ModuleNotFoundError("No module named 'cffi'", name="cffi"), "cannot be imported"),
    (ImportError("something else"), "cannot be loaded: something else"),
])
def test_import_failures(monkeypatch: pytest.MonkeyPatch, error: Exception,
                         match: str) -> None:
    def fail(name: str) -> types.ModuleType:
        raise error

    monkeypatch.setattr(client, "importlib", types.SimpleNamespace(import_module=fail))
    with pytest.raises(BackendUnavailable, match=match):
        import_flux()


def test_classify() -> None:
    perm = frozenset({errno.EINVAL})
    assert isinstance(classify(OSError(errno.EINVAL, "bad queue"), "x", permanent=perm),
                      BackendRejected)
    assert isinstance(classify(OSError(errno.EINVAL, "submissions are disabled"), "x",
                               permanent=perm), BackendUnavailable)
    assert isinstance(classify(OSError(errno.ECONNRESET, "reset"), "x", permanent=perm),
                      BackendUnavailable)
    assert "no answer" in str(classify(TimeoutError(), "x"))
    assert isinstance(classify(RuntimeError("boom"), "x"), BackendUnavailable)
    same = BackendRejected("r")
    assert classify(same, "x") is same
    assert is_transient("flux-job: Connection refused") and not is_transient("invalid queue")


# --------------------------------------------------------------------------- a stand-in flux


class Future:
    def __init__(self, result: Any = None, error: OSError | None = None) -> None:
        self.result = result
        self.error = error
        self.waited: list[float] = []

    def wait_for(self, timeout: float = -1.0) -> Future:
        self.waited.append(timeout)
        return self

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result

    def get_id(self) -> int:
        return int(self.get())

    def get_jobs(self) -> Any:
        return self.get()["jobs"]

    def get_decode(self) -> Any:
        return self.get()


class Stream(Future):
    """A streaming RPC: one item per wait_for/get/reset (an OSError item is raised)."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__()
        self.items = list(items)
        self.resets = 0

    def get(self) -> Any:
        item = self.items[0]
        if isinstance(item, OSError):
            self.items.pop(0)
            raise item
        return item

    def reset(self) -> None:
        self.items.pop(0)
        self.resets += 1


class Handle:
    def __init__(self, uri: str | None = None) -> None:
        self.uri = uri
        self.rpcs: list[tuple[Any, ...]] = []
        self.answers: dict[str, Any] = {}
        self.closed = False

    def attr_get(self, name: str) -> str:
        return {"version": "0.88.0", "security.owner": "0"}[name]

    def rpc(self, topic: str, payload: Any = None, nodeid: int = 0, flags: int = 0) -> Any:
        self.rpcs.append((topic, payload, nodeid, flags))
        answer = self.answers[topic]
        return answer if isinstance(answer, Future) else Future(answer)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_flux(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    calls: dict[str, list[Any]] = {"submit": [], "cancel": [], "list": [], "lookup": [],
                                   "validate": []}
    state = types.SimpleNamespace(calls=calls, connect_error=None, handles=[])

    def make_flux(uri: str | None = None) -> Handle:
        if state.connect_error is not None:
            raise state.connect_error
        h = Handle(uri)
        state.handles.append(h)
        return h

    class JobspecV1:
        def __init__(self, **kwargs: Any) -> None:
            calls["validate"].append(kwargs)
            if "duration" not in kwargs["attributes"].get("system", {}):
                raise ValueError("attributes.system.duration is a required key")

    def submit_async(h: Handle, jobspec: str) -> Future:
        calls["submit"].append(json.loads(jobspec))
        return Future(12345)

    def cancel_async(h: Handle, jobid: int, reason: str | None = None) -> Future:
        calls["cancel"].append((jobid, reason))
        return Future(None)

    def job_list(h: Handle, **kwargs: Any) -> Future:
        calls["list"].append(kwargs)
        return Future({"jobs": [{"id": 1, "name": "x"}, "junk"]})

    def job_info_lookup(h: Handle, jobid: int, keys: list[str]) -> Future:
        calls["lookup"].append((jobid, keys))
        if jobid == 2:
            return Future(error=OSError(errno.EPERM, "not your job"))
        spec: Any = {"attributes": {"user": {"hpc_bridge_uid": f"u{jobid}"}}}
        return Future({"id": jobid, "jobspec": json.dumps(spec) if jobid == 1 else spec})

    flux = types.ModuleType("flux")
    flux.Flux = make_flux  # type: ignore[attr-defined]
    job = types.ModuleType("flux.job")
    job.JobspecV1 = JobspecV1  # type: ignore[attr-defined]
    job.submit_async = submit_async  # type: ignore[attr-defined]
    job.cancel_async = cancel_async  # type: ignore[attr-defined]
    job.job_list = job_list  # type: ignore[attr-defined]
    constants = types.ModuleType("flux.constants")
    constants.FLUX_RPC_STREAMING = 2  # type: ignore[attr-defined]
    constants.FLUX_USERID_UNKNOWN = 0xFFFFFFFF  # type: ignore[attr-defined]
    kvslookup = types.ModuleType("flux.job.kvslookup")
    kvslookup.job_info_lookup = job_info_lookup  # type: ignore[attr-defined]
    for name, module in [("flux", flux), ("flux.job", job), ("flux.constants", constants),
                         ("flux.job.kvslookup", kvslookup)]:
        monkeypatch.setitem(sys.modules, name, module)
    return state


def test_python_flux_calls(fake_flux: types.SimpleNamespace) -> None:
    conn = PythonFlux("local:///run/flux/local", timeout=3.0)
    h = fake_flux.handles[0]
    assert h.uri == "local:///run/flux/local"
    assert (conn.version(), conn.instance_owner()) == ("0.88.0", 0)
    spec = {"version": 1, "resources": [], "tasks": [], "attributes": {"system": {
        "duration": 0}}}
    assert conn.submit(spec) == 12345
    assert fake_flux.calls["submit"] == [spec] and fake_flux.calls["validate"] == [spec]
    conn.cancel(7, "why")
    assert fake_flux.calls["cancel"] == [(7, "why")]
    assert conn.list_jobs(since=5.0) == [{"id": 1, "name": "x"}]
    kwargs = fake_flux.calls["list"][0]
    assert kwargs == {"max_entries": 0, "attrs": list(LIST_ATTRS), "userid": 0xFFFFFFFF,
                      "since": 5.0}
    assert conn.jobspecs([1, 2, 3]) == {
        1: {"attributes": {"user": {"hpc_bridge_uid": "u1"}}},
        3: {"attributes": {"user": {"hpc_bridge_uid": "u3"}}}}
    conn.close()
    assert h.closed


def test_python_flux_refuses_a_jobspec_flux_python_refuses(
        fake_flux: types.SimpleNamespace) -> None:
    conn = PythonFlux(None)
    with pytest.raises(BackendRejected, match="duration is a required key"):
        conn.submit({"attributes": {"system": {}}})
    assert fake_flux.calls["submit"] == []


def test_unreachable_broker(fake_flux: types.SimpleNamespace,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake_flux.connect_error = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    with pytest.raises(BackendUnavailable,
                       match=r"broker at ssh://h/run/x is unreachable: Connection refused"):
        PythonFlux("ssh://h/run/x")
    monkeypatch.delenv("FLUX_URI", raising=False)
    with pytest.raises(BackendUnavailable, match="local instance"):
        PythonFlux(None)


def test_resources_fall_back_to_the_old_topic(fake_flux: types.SimpleNamespace) -> None:
    conn = PythonFlux(None)
    h = fake_flux.handles[0]
    h.answers["resource.sched-status"] = Future(error=OSError(errno.ENOSYS, "no service"))
    h.answers["sched.resource-status"] = {"all": {"version": 1}}
    assert conn.resource_status() == {"all": {"version": 1}}
    h.answers["config.get"] = Future(error=OSError(errno.EPERM, "owner only"))
    assert conn.config() == {}
    h.answers["config.get"] = {"queues": {}}
    assert conn.config() == {"queues": {}}


def test_journal_stream(fake_flux: types.SimpleNamespace) -> None:
    conn = PythonFlux(None)
    h = fake_flux.handles[0]
    h.answers["job-manager.events-journal"] = Stream([
        {"id": 1, "events": [{"name": "submit"}]},
        OSError(errno.ETIMEDOUT, "timeout"),
        {"id": -1, "events": []},
        OSError(errno.ENODATA, "end"),
    ])
    got = list(conn.journal(threading.Event()))
    assert got == [{"id": 1, "events": [{"name": "submit"}]}, {"id": -1, "events": []}]
    topic, payload, _, flags = h.rpcs[0]
    assert (topic, payload, flags) == ("job-manager.events-journal", {"full": False}, 2)


def test_journal_errors_and_stop(fake_flux: types.SimpleNamespace) -> None:
    conn = PythonFlux(None)
    h = fake_flux.handles[0]
    h.answers["job-manager.events-journal"] = Stream([OSError(errno.EPERM, "owner only")])
    with pytest.raises(PermissionError):
        list(conn.journal(threading.Event()))
    stop = threading.Event()
    stop.set()
    h.answers["job-manager.events-journal"] = Stream([{"id": 1, "events": []}])
    assert list(conn.journal(stop)) == []


def test_journal_of_a_dead_broker_raises(fake_flux: types.SimpleNamespace) -> None:
    """flux-python answers None, at once and forever, once the broker is SIGKILLed: the
    stream must end with a connection error (the back end then reconnects), not spin."""
    conn = PythonFlux(None)
    h = fake_flux.handles[0]
    h.answers["job-manager.events-journal"] = Stream([{"id": -1, "events": []}, None, None])
    got = []
    with pytest.raises(ConnectionResetError, match="connection was lost"):
        for resp in conn.journal(threading.Event()):
            got.append(resp)
    assert got == [{"id": -1, "events": []}]


# --------------------------------------------------------------------------- as the owner


def test_owner_command_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUX_URI", "local:///from/env")
    env = owner_command_env(me(), None, "/opt/flux/bin/flux")
    assert env["PATH"].startswith("/opt/flux/bin:")
    assert env["FLUX_URI"] == "local:///from/env"
    assert env["FLUX_F58_FORCE_ASCII"] == "1"
    assert owner_command_env(me(), "local:///cfg", "flux")["FLUX_URI"] == "local:///cfg"
    assert set(env) == {"PATH", "HOME", "USER", "LOGNAME", "LANG", "FLUX_URI",
                        "FLUX_F58_FORCE_ASCII"}


@pytest.fixture
def fake_flux_command(tmp_path: Path) -> Iterator[Path]:
    """A ``flux`` program that records its argv, environment and stdin."""
    record = tmp_path / "record.json"
    program = tmp_path / "bin" / "flux"
    program.parent.mkdir()
    program.write_text(
        "#!" + sys.executable + "\n"
        "import json, os, sys\n"
        f"rec = {str(record)!r}\n"
        "data = sys.stdin.read()\n"
        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ), 'stdin': data,\n"
        "           'cwd': os.getcwd()}, open(rec, 'w'))\n"
        "if 'FAIL' in data: print('flux-job: invalid queue', file=sys.stderr); sys.exit(1)\n"
        "print('fA1b2C3')\n")
    program.chmod(0o755)
    yield program


async def test_run_flux_as_myself(fake_flux_command: Path) -> None:
    env = owner_command_env(me(), "local:///x", str(fake_flux_command))
    done = await run_flux_as(me(), [str(fake_flux_command), "job", "submit"], env=env,
                             stdin=b'{"version": 1}')
    assert done.returncode == 0 and done.stdout.strip() == "fA1b2C3"
    record = json.loads((fake_flux_command.parent.parent / "record.json").read_text())
    assert record["argv"] == ["job", "submit"]
    assert record["stdin"] == '{"version": 1}'
    assert record["cwd"] == "/"
    assert record["env"]["FLUX_URI"] == "local:///x"
    failed = await run_flux_as(me(), [str(fake_flux_command)], env=env, stdin=b"FAIL")
    assert (failed.returncode, failed.message) == (1, "flux-job: invalid queue")


async def test_run_flux_as_refusals(fake_flux_command: Path) -> None:
    env = owner_command_env(me(), None, str(fake_flux_command))
    with pytest.raises(BackendUnavailable, match="not found"):
        await run_flux_as(me(), ["/nonexistent/flux"], env=env)
    if os.geteuid() != 0:
        with pytest.raises(BackendRejected, match="needs root"):
            await run_flux_as(Owner(uid=os.geteuid() + 1, gid=0, user="other"),
                              [str(fake_flux_command)], env=env)


async def test_run_flux_as_another_user_when_root(tmp_path: Path) -> None:
    """As root, the command runs as the owner (uid, gid, their groups), switched by
    setpriv in a child CPython makes with vfork (no user= given to it); a program the
    owner may not execute does not start."""
    require(os.geteuid() == 0, "needs root")
    require(shutil.which("setpriv", path=SAFE_PATH) is not None, "util-linux setpriv is "
            "not installed")
    require("alice" in {p.pw_name for p in pwd.getpwall()}, "no user alice (testbed)")
    alice = pwd.getpwnam("alice")
    owner = Owner(uid=alice.pw_uid, gid=alice.pw_gid, user="alice")
    folder = Path(tempfile.mkdtemp(prefix="hpcb-flux-as-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        flux = folder / "flux"
        flux.write_text("#!/bin/sh\ncat >/dev/null; id -u; id -G\n")
        flux.chmod(0o755)
        made: list[dict[str, Any]] = []
        spawn = subproc.start

        def recorded(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
            made.append({"argv": argv, **kwargs})
            return spawn(argv, **kwargs)

        env = owner_command_env(owner, None, str(flux))
        forget_switchers()  # probed here, as root, whatever an earlier test patched
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(subproc, "start", recorded)
            done = await run_flux_as(owner, [str(flux), "job", "submit"], env=env)
        uid, groups = done.stdout.splitlines()
        assert int(uid) == alice.pw_uid
        assert set(map(int, groups.split())) == set(os.getgrouplist("alice", alice.pw_gid))
        assert "user" not in made[0] and made[0]["argv"][0].endswith("/setpriv")
        flux.chmod(0o700)  # alice may not execute it: it does not start
        with pytest.raises(BackendUnavailable, match=r"cannot run .* as alice"):
            await run_flux_as(owner, [str(flux)], env=env)
    finally:
        shutil.rmtree(folder)


async def test_run_flux_as_times_out(tmp_path: Path) -> None:
    slow = tmp_path / "flux"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    env = owner_command_env(me(), None, str(slow))
    with pytest.raises(BackendUnavailable, match="did not finish"):
        await run_flux_as(me(), [str(slow)], env=env, time_limit=0.3)
