"""bridge.runas: the switch to a job's owner in a vforked child leaves the command as
CPython's own switch does.

Real processes, as root (the daemon's case); alice comes from testbed/install.sh.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.backend import Owner
from bridge.runas import (
    SYSTEM_PATH,
    Spawn,
    Switch,
    Switcher,
    find_switcher,
    forget_switchers,
)
from tests.requirements import require

SAFE_PATH = SYSTEM_PATH
REPO = Path(__file__).resolve().parents[2]
#: /proc/self/status lines that say who a process is and what it may do.
IDENTITY = ("Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:",
            "CapAmb:", "NoNewPrivs:")
STATUS = ["/bin/cat", "/proc/self/status"]


def alice() -> Owner:
    require(os.geteuid() == 0, "needs root (the daemon switches users as root)")
    try:
        entry = pwd.getpwnam("alice")
    except KeyError:
        require(False, "no user alice on this machine (testbed/install.sh)")
        raise
    return Owner(entry.pw_uid, entry.pw_gid, "alice")


@pytest.fixture(autouse=True)
def fresh_probe() -> Iterator[None]:
    forget_switchers()
    yield
    forget_switchers()


def switcher() -> Switcher:
    found = find_switcher()
    require(found.switches, "util-linux setpriv (or env) is missing or does not switch here")
    return found


def identity(argv: list[str], **kwargs: object) -> list[str]:
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         env={"PATH": SAFE_PATH}, cwd="/",
                         **kwargs).stdout  # type: ignore[call-overload]
    return [line for line in out.splitlines() if line.startswith(IDENTITY)]


def spawned(switch: Switch | None, command: list[str], *, pdeathsig: bool = False
            ) -> list[str]:
    spawn = switcher().spawn(switch, command, pdeathsig=pdeathsig)
    assert spawn.kwargs == {}  # the child is made without user=/group=: vfork, not fork
    return spawn.argv


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory every user may search (pytest's own tmp_path is root's 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="hpcb-runas-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_the_switch_leaves_what_cpythons_leaves() -> None:
    owner = alice()
    switch = Switch.to(owner)
    assert switch.groups == tuple(os.getgrouplist("alice", owner.gid))
    by_setpriv = identity(spawned(switch, STATUS, pdeathsig=True))
    by_cpython = identity(STATUS, **switch.popen_kwargs())
    assert by_setpriv == by_cpython
    uid_line = next(line for line in by_setpriv if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(owner.uid)] * 4  # real, effective, saved, fs
    caps = {line.split()[0]: int(line.split()[1], 16) for line in by_setpriv
            if line.startswith("Cap") and not line.startswith("CapBnd")}
    assert caps == {"CapInh:": 0, "CapPrm:": 0, "CapEff:": 0, "CapAmb:": 0}
    groups = next(line for line in by_setpriv if line.startswith("Groups:")).split()[1:]
    assert sorted(map(int, groups)) == sorted(set(switch.groups))  # none of root's


def test_no_inheritable_or_ambient_capability_reaches_the_command() -> None:
    """A daemon started with inheritable and ambient capabilities (a unit's
    AmbientCapabilities=): the command gets none of them."""
    owner = alice()
    runs = switcher()
    assert runs.setpriv is not None
    seeded = [runs.setpriv, "--inh-caps=+dac_override,+kill", "--ambient-caps=+kill", "--"]
    before = identity([*seeded, *STATUS])
    assert int(next(x for x in before if x.startswith("CapAmb:")).split()[1], 16) != 0
    after = identity([*seeded, *spawned(Switch.to(owner), STATUS, pdeathsig=True)])
    caps = {x.split()[0]: int(x.split()[1], 16) for x in after
            if x.startswith(("CapInh:", "CapPrm:", "CapEff:", "CapAmb:"))}
    assert caps == {"CapInh:": 0, "CapPrm:": 0, "CapEff:": 0, "CapAmb:": 0}


def test_ids_are_never_read_as_names(public_dir: Path) -> None:
    """A group (or user) whose *name* is the owner's gid (uid) number, as LDAP sites
    have: ``setpriv --regid=1001`` would take that group's gid, ``+1001`` is read as
    the number. /etc/group and /etc/passwd are bind-mounted copies with those entries
    (and entries named ``+1001``), in a mount namespace of the test's own."""
    owner = alice()
    require(shutil.which("unshare") is not None, "util-linux unshare is missing")
    require(subprocess.run(["unshare", "--mount", "true"], check=False).returncode == 0,
            "no mount namespaces here (CAP_SYS_ADMIN)")
    require(not Path("/var/run/nscd/socket").exists(),
            "nscd runs: it would answer from outside the test's namespace")
    group, passwd = public_dir / "group", public_dir / "passwd"
    group.write_text(Path("/etc/group").read_text() +
                     f"{owner.gid}:x:2999:\n+{owner.gid}:x:2997:\n")
    passwd.write_text(Path("/etc/passwd").read_text() +
                      f"{owner.uid}:x:2998:2999::/nonexistent:/usr/sbin/nologin\n"
                      f"+{owner.uid}:x:2996:2997::/nonexistent:/usr/sbin/nologin\n")
    switch = Switch.to(owner)
    inside = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              f'mount --bind {group} /etc/group && mount --bind {passwd} /etc/passwd && '
              f'grep -c "^{owner.gid}:x:2999:" /etc/group && exec "$@"', "sh"]
    trapped = [*inside, "/usr/bin/setpriv", f"--reuid={owner.uid}", f"--regid={owner.gid}",
               f"--groups={owner.gid}", "--", *STATUS]
    plain = subprocess.run(trapped, capture_output=True, text=True, check=True).stdout
    assert "Gid:\t2999" in plain  # the namespace does hold the trap
    lines = identity([*inside, *spawned(switch, STATUS)])
    assert next(x for x in lines if x.startswith("Uid:")).split()[1:] == [str(owner.uid)] * 4
    assert next(x for x in lines if x.startswith("Gid:")).split()[1:] == [str(owner.gid)] * 4
    groups = next(x for x in lines if x.startswith("Groups:")).split()[1:]
    assert sorted(map(int, groups)) == sorted(set(switch.groups))


def test_a_program_the_owner_may_not_execute_does_not_start(public_dir: Path) -> None:
    """The command is executed with the owner's rights alone: a mode that forbids the
    owner to execute it holds, as with CPython's switch; the switch's own failure is
    told from the command's."""
    owner = alice()
    locked = public_dir / "locked"
    locked.write_text("#!/bin/sh\nexit 0\n")
    locked.chmod(0o700)  # root's: alice may not run it
    runs = switcher()
    spawn = runs.spawn(Switch.to(owner), [str(locked)])
    done = subprocess.run(spawn.argv, capture_output=True, check=False, cwd="/")
    assert done.returncode == 126
    message = spawn.failed(done.returncode, done.stderr)
    assert message is not None and str(locked) in message and "Permission denied" in message
    with pytest.raises(PermissionError):
        subprocess.run([str(locked)], check=False, cwd="/", **Switch.to(owner).popen_kwargs())
    missing = runs.spawn(Switch.to(owner), ["/nonexistent-hpcb/gone"], pdeathsig=True)
    gone = subprocess.run(missing.argv, capture_output=True, check=False)
    assert gone.returncode == 127
    assert missing.failed(gone.returncode, gone.stderr) is not None
    # The command's own failure, even with the same status, is the command's.
    assert spawn.failed(127, b"sh: 1: nope: not found\n") is None
    assert spawn.failed(2, b"setpriv: something\n") is None
    assert spawn.failed(0, b"") is None
    # Messages name the program as it was run, or by its base name (other builds).
    assert spawn.failed(126, b"env: 'x': Permission denied\n") == "env: 'x': Permission denied"
    assert spawn.failed(125, b"env: invalid option\n") is not None
    assert spawn.failed(1, f"{runs.setpriv}: unrecognized option\n".encode()) is not None
    # Run without wrappers, a command's "env: " line is the command's own.
    assert Spawn(["/usr/bin/sbatch"]).failed(127, b"env: 'python3': No such file\n") is None


def test_parent_death_signal_survives_the_switch() -> None:
    owner = alice()
    script = ("import ctypes; s = ctypes.c_int(0); "
              "ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)")
    done = subprocess.run(spawned(Switch.to(owner), ["/usr/bin/python3", "-c", script],
                                  pdeathsig=True),
                          capture_output=True, text=True, check=True, cwd="/")
    assert done.stdout.strip() == "9"


def test_the_switch_works_under_the_shipped_units_hardening() -> None:
    """packaging/systemd/hpc-bridge.service keeps only a few capabilities and sets
    NoNewPrivileges: the switch needs nothing more."""
    owner = alice()
    unit = (REPO / "packaging" / "systemd" / "hpc-bridge.service").read_text()
    assert "NoNewPrivileges=yes" in unit.splitlines()
    bounding = unit_bounding_set("hpc-bridge.service")
    runs = switcher()
    assert runs.setpriv is not None
    confined = [runs.setpriv, f"--bounding-set={bounding}", "--no-new-privs", "--"]
    lines = identity([*confined, *spawned(Switch.to(owner), STATUS, pdeathsig=True)])
    uid_line = next(line for line in lines if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(owner.uid)] * 4
    assert "NoNewPrivs:\t1" in lines


def unit_bounding_set(*units: str) -> str:
    """setpriv's --bounding-set for the capabilities the named files of
    packaging/systemd/ keep (CapabilityBoundingSet= lines add up, as in systemd)."""
    kept = [cap for name in units
            for line in (REPO / "packaging" / "systemd" / name).read_text().splitlines()
            if line.startswith("CapabilityBoundingSet=")
            for cap in line.split("=", 1)[1].split()]
    return ",".join(["-all", *(f"+{cap.removeprefix('CAP_').lower()}" for cap in kept)])


def test_client_root_needs_the_drop_in_and_works_with_it() -> None:
    """client_root runs chroot(8), as root or switching to the owner: under the
    shipped unit's bounding set it cannot; with packaging/systemd/client-root.conf
    added it can."""
    owner = alice()
    runs = switcher()
    chroot = shutil.which("chroot", path=SAFE_PATH)
    assert runs.setpriv is not None and chroot is not None
    userspec = Switch.to(owner).chroot_options()
    for units, works in ((("hpc-bridge.service",), False),
                         (("hpc-bridge.service", "client-root.conf"), True)):
        confined = [runs.setpriv, f"--bounding-set={unit_bounding_set(*units)}",
                    "--no-new-privs", "--"]
        for command in ([chroot, "/", "true"], [chroot, *userspec, "/", "id", "-u"]):
            done = subprocess.run([*confined, *command], capture_output=True, text=True,
                                  check=False, cwd="/", env={"PATH": SAFE_PATH})
            assert (done.returncode == 0) is works, (units, command, done)
            if works and command[-1] == "-u":
                assert done.stdout.strip() == str(owner.uid)
            if not works:
                assert "Operation not permitted" in done.stderr


def test_the_drop_in_allows_the_chroot_call_that_the_units_filter_leaves_out() -> None:
    """systemd's own tables: chroot is in @mount, not in @system-service (what the
    unit's SystemCallFilter allows); the drop-in adds exactly that call."""
    analyze = shutil.which("systemd-analyze")
    require(analyze is not None, "systemd-analyze is missing: apt-get install -y systemd")
    assert analyze is not None

    def calls(group: str) -> set[str]:
        """The calls of ``group``, its nested groups expanded."""
        out = subprocess.run([analyze, "syscall-filter", group], capture_output=True,
                             text=True, check=True).stdout
        entries = {line.strip() for line in out.splitlines()
                   if line.startswith(" ") and not line.strip().startswith("#")}
        found = {e for e in entries if not e.startswith("@")}
        for nested in sorted(e for e in entries if e.startswith("@")):
            found |= calls(nested)
        return found

    unit = (REPO / "packaging" / "systemd" / "hpc-bridge.service").read_text().splitlines()
    assert "SystemCallFilter=@system-service" in unit
    service = calls("@system-service")
    assert {"setuid", "setgid", "setgroups", "execve"} <= service  # the switch's own
    assert "chroot" not in service and "chroot" in calls("@mount")
    drop_in = (REPO / "packaging" / "systemd" / "client-root.conf").read_text().splitlines()
    assert [line for line in drop_in if line.startswith("SystemCallFilter=")] == [
        "SystemCallFilter=chroot"]


def test_an_unknown_user_keeps_only_its_gid() -> None:
    switch = Switch.to(Owner(uid=54321, gid=54321, user="no-such-user-hpcb"))
    assert switch.groups == (54321,)


def test_a_setpriv_that_does_not_work_is_not_used(public_dir: Path) -> None:
    """The probe: a setpriv that fails (an old util-linux without --pdeathsig, a
    seccomp filter) is not used; CPython switches, and no signal is set."""
    alice()
    fake = public_dir / "setpriv"
    fake.write_text("#!/bin/sh\necho 'setpriv: unrecognized option' >&2\nexit 1\n")
    fake.chmod(0o755)
    for name in ("env", "true"):
        os.symlink(shutil.which(name, path=SAFE_PATH) or f"/bin/{name}", public_dir / name)
    found = find_switcher(str(public_dir))
    assert found == Switcher(None, str(public_dir / "env"), False)
    assert found.spawn(Switch(1001, 1001, (1001,)), ["/usr/bin/sbatch"], pdeathsig=True) == \
        Spawn(["/usr/bin/sbatch"], {"user": 1001, "group": 1001, "extra_groups": [1001]})


def test_what_is_run() -> None:
    runs = Switcher("/usr/bin/setpriv", "/usr/bin/env", True)
    switch = Switch(uid=1001, gid=1001, groups=(1001, 27, 100))
    assert runs.spawn(switch, ["/usr/bin/sbatch", "x"], pdeathsig=True) == Spawn([
        "/usr/bin/setpriv", "--reuid=+1001", "--regid=+1001", "--groups=+1001,+27,+100",
        "--inh-caps=-all", "--pdeathsig", "KILL", "--", "/usr/bin/env", "--",
        "/usr/bin/sbatch", "x"], {}, ("/usr/bin/setpriv", "/usr/bin/env"))
    assert runs.spawn(None, ["/usr/bin/squeue"], pdeathsig=True) == Spawn([
        "/usr/bin/setpriv", "--pdeathsig", "KILL", "--", "/usr/bin/squeue"], {},
        ("/usr/bin/setpriv",))
    assert runs.spawn(None, ["bin/squeue"]) == Spawn(["/bin/squeue"])  # from /, as cwd
    assert runs.spawn(None, ["/usr/sbin/chroot", "/r", "squeue"], pdeathsig=True,
                      wrappers=["/usr/sbin/chroot"]).wrappers == ("/usr/sbin/chroot",
                                                                  "/usr/bin/setpriv")
    forked = {"user": 1001, "group": 1001, "extra_groups": [1001, 27, 100]}
    # env would read a path with "=" as a variable: CPython switches that one, and
    # setpriv, run as the owner after the switch, sets the signal.
    assert runs.spawn(switch, ["/opt/a=b/sbatch"], pdeathsig=True) == Spawn(
        ["/usr/bin/setpriv", "--pdeathsig", "KILL", "--", "/opt/a=b/sbatch"], forked,
        ("/usr/bin/setpriv",))
    assert runs.spawn(switch, ["/opt/a=b/sbatch"]) == Spawn(["/opt/a=b/sbatch"], forked)
    # setpriv sets signals but does not switch here (or no env): CPython switches.
    for limited in (Switcher("/usr/bin/setpriv", "/usr/bin/env", False),
                    Switcher("/usr/bin/setpriv", None, True)):
        assert limited.spawn(switch, ["/usr/bin/sbatch"]) == Spawn(["/usr/bin/sbatch"], forked)
    # No working setpriv: CPython switches (and forks), and no signal is set.
    assert Switcher(None, "/usr/bin/env", False).spawn(
        switch, ["/usr/bin/sbatch"], pdeathsig=True) == Spawn(["/usr/bin/sbatch"], forked)
    assert switch.chroot_options() == ["--userspec=+1001:+1001", "--groups=+1001,+27,+100"]
