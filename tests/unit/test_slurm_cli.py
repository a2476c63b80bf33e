"""slurm_adapter.cli with stand-in Slurm commands (the real ones: tests/integration).

The stand-ins print what Slurm 22.05 printed on the test bed (messages, JSON) and
record how they were called: argv, environment, stdin, the --export-file fd.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import subproc
from bridge.backend import BackendRejected, BackendUnavailable, Owner
from bridge.runas import Switcher, forget_switchers
from slurm_adapter.cli import SAFE_PATH, SlurmCli
from tests.requirements import require
from tests.unit.builders import slurm_fields

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
ME = Owner(uid=os.geteuid(), gid=os.getegid(), user=pwd.getpwuid(os.geteuid()).pw_name)

RECORDER = """#!{python}
import json, os, sys, ctypes
fd = None
for a in sys.argv:
    if a.startswith("--export-file="):
        fd = int(a.split("=", 1)[1])
libc = ctypes.CDLL(None)
sig = ctypes.c_int(0)
libc.prctl(2, ctypes.byref(sig))  # PR_GET_PDEATHSIG
script = [a for a in sys.argv if a.startswith("/proc/self/fd/")]
record = {{"argv": sys.argv[1:], "env": dict(os.environ), "stdin": sys.stdin.read(),
          "script": open(script[0]).read() if script else None,
          "export": os.read(fd, 1 << 20).decode() if fd is not None else None,
          "pdeathsig": sig.value, "uid": os.getuid()}}
open({record!r}, "w").write(json.dumps(record))
sys.stdout.write({stdout!r})
sys.stderr.write({stderr!r})
sys.exit({rc})
"""


@pytest.fixture
def bindir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hpcb-fake-slurm-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def fake(bindir: Path, name: str, *, stdout: str = "", stderr: str = "", rc: int = 0) -> Path:
    record = bindir / f"{name}.json"
    script = bindir / name
    script.write_text(RECORDER.format(python=sys.executable, record=str(record), stdout=stdout,
                                      stderr=stderr, rc=rc))
    script.chmod(0o755)
    return record


def fake_sh(bindir: Path, name: str, body: str) -> None:
    script = bindir / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


async def test_submit_hands_the_environment_through_a_memory_file(bindir: Path) -> None:
    record = fake(bindir, "sbatch", stdout="4242\n")
    cli = SlurmCli(path=f"{bindir}:/usr/bin:/bin", slurm_conf="/etc/slurm/slurm.conf")
    env = {"SECRET": "s3cret", "MULTI": "a\nb", "SBATCH_PARTITION": "evil", "PATH": "/opt/bin"}
    job_id = await cli.submit("#!/bin/bash\necho hi\n", ["--job-name=x", "--nodes=2"], env, ME)
    assert job_id == "4242"
    seen = json.loads(record.read_text())
    assert seen["argv"][:4] == ["--parsable", "--ignore-pbs", "--export=ALL",
                                seen["argv"][3]]
    assert seen["argv"][3].startswith("--export-file=")
    assert seen["argv"][4:6] == ["--job-name=x", "--nodes=2"]
    assert seen["argv"][6].startswith("/proc/self/fd/")
    assert seen["argv"][7:] == []
    assert seen["script"] == "#!/bin/bash\necho hi\n"
    # sbatch itself sees no user variable (no SBATCH_* can steer it) ...
    assert {k: v for k, v in seen["env"].items() if k != "LC_CTYPE"} == {
        "PATH": SAFE_PATH, "SLURM_CONF": "/etc/slurm/slurm.conf"}
    # ... the job gets exactly the plan's environment plus SLURM_CONF.
    exported = dict(item.split("=", 1) for item in seen["export"].split("\0") if item)
    assert exported == {**env, "SLURM_CONF": "/etc/slurm/slurm.conf"}
    # nothing of the environment is on the command line
    assert not any("s3cret" in a for a in seen["argv"])
    # script arguments follow the script, as argv elements
    with_args = await cli.submit("#!/bin/sh\n", [], env, ME, ("$(x)", "two words"))
    assert with_args == "4242"
    assert json.loads(record.read_text())["argv"][-2:] == ["$(x)", "two words"]


async def test_children_die_with_the_daemon(bindir: Path) -> None:
    record = fake(bindir, "sbatch", stdout="1\n")
    require(shutil.which("setpriv") is not None, "util-linux setpriv is not installed")
    await SlurmCli(path=f"{bindir}:/usr/bin:/bin").submit("S", [], {}, ME)
    assert json.loads(record.read_text())["pdeathsig"] == 9


async def test_cluster_suffix_of_parsable_output(bindir: Path) -> None:
    fake(bindir, "sbatch", stdout="77;cluster2\n")
    assert await SlurmCli(path=str(bindir)).submit("S", [], {}, ME) == "77"


@pytest.mark.parametrize(("stderr", "kind", "text"), [
    ("sbatch: error: invalid partition specified: nope\n"
     "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
     BackendRejected, "Batch job submission failed: Invalid partition name specified"),
    ("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
     "(connect failure)\n", BackendUnavailable, "Unable to contact slurm controller"),
    ("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n",
     BackendUnavailable, "Socket timed out"),
    ("sbatch: error: Invalid generic resource (gres) specification\n",
     BackendRejected, "Invalid generic resource"),
])
async def test_submit_errors_carry_sbatch_messages(bindir: Path, stderr: str, kind: type,
                                                   text: str) -> None:
    fake(bindir, "sbatch", stderr=stderr, rc=1)
    with pytest.raises(kind, match=text.replace("(", r"\(").replace(")", r"\)")) as info:
        await SlurmCli(path=str(bindir)).submit("S", [], {}, ME)
    assert "sbatch: error:" not in str(info.value)


async def test_timeouts_kill_the_command(bindir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    fake_sh(bindir, "sbatch", f'echo $$ > {pidfile}\nexec sleep 30\n')
    with pytest.raises(BackendUnavailable, match=r"did not finish within 0\.3s"):
        await SlurmCli(path=str(bindir), timeout=0.3).submit("S", [], {}, ME)
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_missing_commands_are_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="sbatch not found"):
        await SlurmCli(path=str(tmp_path)).submit("S", [], {}, ME)


async def test_squeue_json_errors_despite_exit_0(bindir: Path) -> None:
    recorded = (FIXTURES / "squeue_22.05_jobs.json").read_text()
    fake(bindir, "squeue", stdout=recorded)
    cli = SlurmCli(path=str(bindir))
    assert [slurm_fields(j) for j in (await cli.jobs())["jobs"]] == \
        [slurm_fields(j) for j in json.loads(recorded)["jobs"]]
    fake(bindir, "squeue", stdout=(FIXTURES / "squeue_22.05_controller_down.json").read_text())
    with pytest.raises(BackendUnavailable, match="Failed while looking for jobs"):
        await cli.jobs()
    fake(bindir, "squeue", stdout="not json")
    with pytest.raises(BackendUnavailable, match="no JSON"):
        await cli.jobs()


@pytest.mark.parametrize(("rc", "stderr", "kind"), [
    (0, "", None),
    (1, "scancel: error: Kill job error on job id 9: Invalid job id specified\n", None),
    (1, "scancel: error: Kill job error on job id 9: Job/step already completing or "
        "completed\n", None),
    (210, "scancel: error: Kill job error on job id 9: Access/permission denied\n",
     BackendRejected),
    (8, "scancel: error: Kill job error on job id 9: Unable to contact slurm controller "
        "(connect failure)\n", BackendUnavailable),
])
async def test_cancel(bindir: Path, rc: int, stderr: str, kind: type | None) -> None:
    record = fake(bindir, "scancel", stderr=stderr, rc=rc)
    cli = SlurmCli(path=str(bindir))
    if kind is None:
        await cli.cancel("9", ME)
    else:
        with pytest.raises(kind):
            await cli.cancel("9", ME)
    assert json.loads(record.read_text())["argv"] == ["9"]


async def test_cancel_refuses_a_non_numeric_id(bindir: Path) -> None:
    with pytest.raises(BackendRejected):
        await SlurmCli(path=str(bindir)).cancel("9; rm -rf /", ME)


async def test_topology_errors_on_stderr_with_exit_0(bindir: Path) -> None:
    fake(bindir, "scontrol", stdout=(FIXTURES / "scontrol_show_topology.txt").read_text())
    cli = SlurmCli(path=str(bindir))
    assert (await cli.topology()).startswith("SwitchName=leaf1")
    fake(bindir, "scontrol", stderr="slurm_load_topo error: Unable to contact slurm controller "
                                    "(connect failure)\n")
    with pytest.raises(BackendUnavailable):
        await cli.topology()


async def test_other_owners_need_root(bindir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake(bindir, "sbatch", stdout="1\n")
    monkeypatch.setattr(os, "geteuid", lambda: 4321)
    with pytest.raises(BackendRejected, match="must run as root"):
        await SlurmCli(path=str(bindir)).submit("S", [], {}, Owner(1001, 1001, "alice"))


@pytest.mark.parametrize("switch_by", ["setpriv", "cpython"])
async def test_runs_as_the_owner_when_root(bindir: Path, monkeypatch: pytest.MonkeyPatch,
                                           switch_by: str) -> None:
    """setpriv switches in a child made without user=/group= (CPython makes it with
    vfork, not a fork of the daemon); where setpriv does not work CPython switches."""
    require(os.geteuid() == 0, "needs root")
    users = {p.pw_name: p for p in pwd.getpwall()}
    require("alice" in users, "no user alice on this machine (testbed/install.sh)")
    alice = users["alice"]
    out = bindir / "who"
    bindir.chmod(0o1777)
    fake_sh(bindir, "sbatch", f'cat >/dev/null; id -u > {out}; id -G >> {out}; echo 5\n')
    (bindir / "sbatch").chmod(0o755 | stat.S_IXOTH)
    owner = Owner(alice.pw_uid, alice.pw_gid, "alice")
    made: list[dict[str, object]] = []
    spawn = subproc.start

    def recorded(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        made.append({"argv": argv, **kwargs})
        return spawn(argv, **kwargs)

    monkeypatch.setattr(subproc, "start", recorded)
    forget_switchers()  # probed here, as root, whatever an earlier test patched
    cli = SlurmCli(path=str(bindir))
    if switch_by == "cpython":  # a host where setpriv does not work
        cli._switcher = Switcher(None, None, switches=False)
    assert await cli.submit("S", [], {}, owner) == "5"
    uid, groups = out.read_text().splitlines()
    assert int(uid) == alice.pw_uid
    assert set(map(int, groups.split())) == set(os.getgrouplist("alice", alice.pw_gid))
    if switch_by == "setpriv":
        assert "user" not in made[-1] and "extra_groups" not in made[-1]
        assert str(made[-1]["argv"][0]).endswith("/setpriv")  # type: ignore[index]
    else:
        assert made[-1]["user"] == alice.pw_uid


async def test_the_owners_command_dies_with_the_daemon(bindir: Path) -> None:
    require(os.geteuid() == 0, "needs root")
    require(shutil.which("setpriv") is not None, "util-linux setpriv is not installed")
    require("alice" in {p.pw_name for p in pwd.getpwall()}, "no user alice (testbed)")
    alice = pwd.getpwnam("alice")
    bindir.chmod(0o1777)
    record = fake(bindir, "sbatch", stdout="1\n")
    await SlurmCli(path=f"{bindir}:/usr/bin:/bin").submit(
        "S", [], {}, Owner(alice.pw_uid, alice.pw_gid, "alice"))
    seen = json.loads(record.read_text())
    assert (seen["uid"], seen["pdeathsig"]) == (alice.pw_uid, 9)


async def test_a_command_the_owner_may_not_run_is_unavailable(bindir: Path) -> None:
    """As with CPython's switch (an OSError), the command did not start: the back end is
    unavailable, the job not rejected."""
    require(os.geteuid() == 0, "needs root")
    require("alice" in {p.pw_name for p in pwd.getpwall()}, "no user alice (testbed)")
    alice = pwd.getpwnam("alice")
    fake_sh(bindir, "sbatch", "echo 1\n")
    (bindir / "sbatch").chmod(0o700)
    with pytest.raises(BackendUnavailable, match=r"cannot run sbatch: .*Permission denied"):
        await SlurmCli(path=str(bindir)).submit(
            "S", [], {}, Owner(alice.pw_uid, alice.pw_gid, "alice"))


async def test_hold_requeues_a_running_job_and_holds_a_pending_one(bindir: Path) -> None:
    """The job's state decides: running -> ``scontrol requeuehold``, pending ->
    ``scontrol hold``; a finished or unknown job is refused, never requeued (Slurm
    would run a finished job again); Slurm's own refusal is the caller's error."""
    calls = bindir / "calls"
    fake_sh(bindir, "squeue", 'case "$4" in 7) echo RUNNING;; 8) echo PENDING;;'
            ' 5) echo COMPLETED;; 6) ;; 9) echo RUNNING;; esac\n')
    fake_sh(bindir, "scontrol", f'echo "$*" >> {calls}\n'
            '[ "$2" = 9 ] && { echo "Requested operation is presently disabled for job 9"'
            ' >&2; exit 1; }\nexit 0\n')
    cli = SlurmCli(path=str(bindir))
    await cli.hold("7", ME)
    await cli.hold("8", ME)
    await cli.release("8", ME)
    assert calls.read_text().splitlines() == ["requeuehold 7", "hold 8", "release 8"]
    for finished in ("5", "6"):
        with pytest.raises(BackendRejected, match="nothing to suspend"):
            await cli.hold(finished, ME)
    with pytest.raises(BackendRejected, match="presently disabled"):
        await cli.hold("9", ME)  # --no-requeue
    assert calls.read_text().splitlines()[-1] == "requeuehold 9"
    with pytest.raises(BackendRejected):
        await cli.hold("9 --all", ME)


async def test_hold_follows_a_job_that_starts_between_the_look_and_the_command(
        bindir: Path) -> None:
    """squeue said PENDING, the job started: ``hold`` answers "no longer pending
    execution" and ``requeuehold`` is tried (and the other way round)."""
    calls = bindir / "calls"
    fake_sh(bindir, "squeue", 'case "$4" in 4) echo PENDING;; 3) echo RUNNING;; esac\n')
    fake_sh(bindir, "scontrol", f'echo "$*" >> {calls}\n'
            'case "$1 $2" in\n'
            '  "hold 4") echo "Job is no longer pending execution for job 4" >&2; exit 1;;\n'
            '  "requeuehold 3") echo "Job is pending execution for job 3" >&2; exit 1;;\n'
            'esac\nexit 0\n')
    cli = SlurmCli(path=str(bindir))
    await cli.hold("4", ME)
    await cli.hold("3", ME)
    assert calls.read_text().splitlines() == ["hold 4", "requeuehold 4", "requeuehold 3",
                                              "hold 3"]
