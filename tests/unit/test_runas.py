"""bridge.runas: setpriv's switch to a job's owner leaves the child as CPython's does.

Real processes, as root (the daemon's case); alice comes from testbed/install.sh.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from bridge.backend import Owner
from bridge.runas import Switch, Switcher, find_switcher
from tests.requirements import require

SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
#: /proc/self/status lines that say who a process is and what it may do.
IDENTITY = ("Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:",
            "CapAmb:", "NoNewPrivs:")


def alice() -> Owner:
    require(os.geteuid() == 0, "needs root (the daemon switches users as root)")
    try:
        entry = pwd.getpwnam("alice")
    except KeyError:
        require(False, "no user alice on this machine (testbed/install.sh)")
        raise
    return Owner(entry.pw_uid, entry.pw_gid, "alice")


def switcher() -> Switcher:
    found = find_switcher(SAFE_PATH)
    require(found is not None, "util-linux setpriv is not installed")
    assert found is not None
    return found


def identity(argv: list[str], **kwargs: object) -> list[str]:
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         env={"PATH": SAFE_PATH}, cwd="/",
                         **kwargs).stdout  # type: ignore[call-overload]
    return [line for line in out.splitlines() if line.startswith(IDENTITY)]


STATUS = ["/bin/cat", "/proc/self/status"]


def test_setprivs_switch_leaves_what_cpythons_leaves() -> None:
    owner = alice()
    switch = Switch.to(owner)
    assert switch.groups == tuple(os.getgrouplist("alice", owner.gid))
    by_setpriv = identity(switcher().argv(switch, STATUS))
    by_cpython = identity(STATUS, **switch.popen_kwargs())
    assert by_setpriv == by_cpython
    uid_line = next(line for line in by_setpriv if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(owner.uid)] * 4  # real, effective, saved, fs
    caps = {line.split()[0]: int(line.split()[1], 16) for line in by_setpriv
            if line.startswith("Cap") and not line.startswith("CapBnd")}
    assert caps == {"CapInh:": 0, "CapPrm:": 0, "CapEff:": 0, "CapAmb:": 0}


def test_only_the_groups_the_system_gives() -> None:
    """Root's own groups are not kept: exactly getgrouplist's, as CPython's switch."""
    owner = alice()
    lines = identity(switcher().argv(Switch.to(owner), STATUS))
    groups = next(line for line in lines if line.startswith("Groups:")).split()[1:]
    assert sorted(map(int, groups)) == sorted(set(os.getgrouplist("alice", owner.gid)))


def test_an_unknown_user_keeps_only_its_gid() -> None:
    switch = Switch.to(Owner(uid=54321, gid=54321, user="no-such-user-hpcb"))
    assert switch.groups == (54321,)


def test_a_program_the_owner_may_not_execute_does_not_start() -> None:
    """setpriv keeps root's capabilities until its exec: the command is executed by
    env, as the owner alone, so a mode that forbids the owner to execute it holds (as
    with CPython's switch), and the switch's failure is told from the command's."""
    owner = alice()
    folder = Path(tempfile.mkdtemp(prefix="hpcb-runas-", dir="/tmp"))
    folder.chmod(0o755)  # alice may search it; only the program's own mode forbids
    try:
        locked_program(owner, folder / "locked")
    finally:
        shutil.rmtree(folder)


def locked_program(owner: Owner, locked: Path) -> None:
    locked.write_text("#!/bin/sh\nexit 0\n")
    locked.chmod(0o700)  # root's: alice may not run it
    runs = switcher()
    done = subprocess.run(runs.argv(Switch.to(owner), [str(locked)]), capture_output=True,
                          check=False, cwd="/")
    assert done.returncode == 126
    message = runs.failed(done.returncode, done.stderr)
    assert message is not None and str(locked) in message and "Permission denied" in message
    with pytest.raises(PermissionError):
        subprocess.run([str(locked)], check=False, cwd="/", **Switch.to(owner).popen_kwargs())
    missing = subprocess.run(runs.argv(Switch.to(owner), ["/nonexistent-hpcb/gone"]),
                             capture_output=True, check=False, cwd="/")
    assert missing.returncode == 127
    assert runs.failed(missing.returncode, missing.stderr) is not None
    # The command's own failure, even with the same status, is the command's.
    assert runs.failed(127, b"sh: 1: nope: not found\n") is None
    assert runs.failed(1, b"setpriv: nothing\n") is None
    assert runs.failed(0, b"") is None


def test_parent_death_signal_survives_the_switch() -> None:
    owner = alice()
    script = ("import ctypes; s = ctypes.c_int(0); "
              "ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)")
    done = subprocess.run(switcher().argv(Switch.to(owner), ["/usr/bin/python3", "-c", script],
                                          pdeathsig=True),
                          capture_output=True, text=True, check=True, cwd="/")
    assert done.stdout.strip() == "9"


def test_the_argv() -> None:
    runs = Switcher("/usr/bin/setpriv", "/usr/bin/env")
    switch = Switch(uid=1001, gid=1001, groups=(1001, 27, 100))
    assert runs.argv(switch, ["/usr/bin/sbatch", "x"], pdeathsig=True) == [
        "/usr/bin/setpriv", "--reuid=1001", "--regid=1001", "--groups=1001,27,100",
        "--inh-caps=-all", "--pdeathsig", "KILL", "--", "/usr/bin/env", "--",
        "/usr/bin/sbatch", "x"]
    assert runs.argv(None, ["/usr/bin/squeue"], pdeathsig=True) == [
        "/usr/bin/setpriv", "--pdeathsig", "KILL", "--", "/usr/bin/squeue"]
    assert switch.popen_kwargs() == {"user": 1001, "group": 1001,
                                     "extra_groups": [1001, 27, 100]}


def test_the_switch_works_under_the_shipped_units_hardening() -> None:
    """packaging/systemd/hpc-bridge.service keeps only a few capabilities and sets
    NoNewPrivileges: setpriv's switch needs nothing more (a daemon under that unit runs
    its commands as their owners)."""
    owner = alice()
    unit = (Path(__file__).resolve().parents[2] / "packaging" / "systemd" /
            "hpc-bridge.service").read_text()
    kept = next(line.split("=", 1)[1].split() for line in unit.splitlines()
                if line.startswith("CapabilityBoundingSet="))
    assert "NoNewPrivileges=yes" in unit.splitlines()
    bounding = ",".join(["-all", *(f"+{cap.removeprefix('CAP_').lower()}" for cap in kept)])
    runs = switcher()
    confined = [runs.setpriv, f"--bounding-set={bounding}", "--no-new-privs", "--"]
    lines = identity([*confined, *runs.argv(Switch.to(owner), STATUS, pdeathsig=True)])
    uid_line = next(line for line in lines if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(owner.uid)] * 4
    assert "NoNewPrivs:\t1" in lines
