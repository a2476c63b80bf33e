"""sbatch compatibility on the real Slurm 22.05 (issue 12): tbatch and real ``sbatch`` run
the same script as alice, and Slurm's record of both jobs is compared.

* options tbatch passes to Slurm as they are (mail, signal, requeue, comment, begin,
  deadline, hint, memory per CPU, distribution ...) reach the job as sbatch's do, through
  slurmrestd's daemon (which submits such a job with sbatch) and through the CLI one;
* every option tbatch refuses is reported in one error, with its line;
* ``--test-only`` gives Slurm's own estimate, as sbatch's.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, wait_for
from tests.integration.conftest_slurm import cluster_for

pytestmark = pytest.mark.integration

PASSED_SCRIPT = """#!/bin/sh
#SBATCH --mail-type=END,FAIL --mail-user=alice@example.org
#SBATCH --signal=B:USR1@60 --no-requeue --open-mode=append
#SBATCH --comment="my run 7" --begin=now+1hour --deadline=now+10days
#SBATCH --hint=nomultithread --mem-per-cpu=100 -m cyclic --wckey=proj
#SBATCH --time=5 --job-name=passed
echo hi
"""

#: scontrol fields that must agree between the sbatch and the tbatch job (not NumNodes:
#: the bridge always passes --nodes=N, which Slurm shows as N-N).
SAME = ("MailUser", "MailType", "Requeue", "MinMemoryCPU", "ReqB:S:C:T", "TimeLimit",
        "Partition", "JobName", "UserId", "Reason", "Features")


def _scontrol(job_id: str, root: str | None = None) -> dict[str, str]:
    argv = ["scontrol", "show", "job", job_id]
    out = subprocess.run(["chroot", root, *argv] if root else argv, capture_output=True,
                         text=True, check=True).stdout
    fields = dict(re.findall(r"(\S+?)=(\S*)", out))
    comment = re.search(r"^\s*Comment=(.*?)\s*$", out, re.M)
    fields["Comment"] = comment.group(1) if comment else ""
    return fields


def _sbatch(user: str, script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", str(script)],
                          cwd=cwd, capture_output=True, text=True, check=False, timeout=60)


def _seconds(stamp: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(stamp).timestamp())


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_passed_options_reach_slurm_as_sbatchs_do(
    fixture: str, request: pytest.FixtureRequest, outdir: Path
) -> None:
    d: Daemon = request.getfixturevalue(fixture)
    script = outdir / "passed.sh"
    script.write_text(PASSED_SCRIPT)
    theirs = _sbatch("alice", script, outdir)
    assert theirs.returncode == 0, theirs.stderr
    sbatch_id = theirs.stdout.strip().split(";")[0]
    res = d.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
    assert res.returncode == 0, res.stderr
    job = d.wait_state(res.stdout.strip(), ["Submitted"])
    ours_id = job["backendId"]
    try:
        ref, ours = _scontrol(sbatch_id), _scontrol(ours_id)
        assert {k: ours.get(k) for k in SAME} == {k: ref.get(k) for k in SAME}
        assert ref["MailType"] == "END,FAIL" and ref["Requeue"] == "0"
        assert ours["Reason"] == "BeginTime" and ours["MinMemoryCPU"] == "100M"
        for job_fields in (ref, ours):  # --begin / --deadline relative to submission
            submitted = _seconds(job_fields["SubmitTime"])
            # sbatch reads "now" itself, a second or so before slurmctld's SubmitTime.
            assert abs(_seconds(job_fields["EligibleTime"]) - submitted - 3600) <= 2
            assert abs(_seconds(job_fields["Deadline"]) - submitted - 10 * 86400) <= 2
        # The user's comment follows the bridge's key (by which it finds the job again).
        assert ref["Comment"] == "my run 7"
        assert re.fullmatch(r"hpc-bridge:\S+ my run 7", ours["Comment"]), ours["Comment"]
        if fixture == "daemon":  # slurmrestd v0.0.38 has none of these fields: sbatch
            assert "submitting it with sbatch instead" in d.log.read_text()
    finally:
        subprocess.run(["scancel", sbatch_id, ours_id], check=False)


def test_every_refused_option_in_one_error(daemon: Daemon, outdir: Path) -> None:
    script = outdir / "refused.sh"
    script.write_text("#!/bin/sh\n#SBATCH --core-spec=1 -N 1\n#SBATCH -W --reboot\n"
                      "echo never\n")
    res = daemon.cli("alice", "tbatch", "--contiguous", str(script), cwd=outdir)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        "tbatch: error: command line: option '--contiguous' is not supported by tbatch",
        f"tbatch: error: {script}:2: option '--core-spec' is not supported by tbatch",
        f"tbatch: error: {script}:3: option '-W' (--wait) is not supported by tbatch",
        f"tbatch: error: {script}:3: option '--reboot' is not supported by tbatch",
    ]
    assert res.stdout == ""


_ESTIMATE = re.compile(r"^(sbatch|tbatch): Job (?:\d+ )?to start at (\S+) using (\d+) "
                       r"processors on nodes? (\S+) in partition (\S+)$", re.M)


def test_test_only_agrees_with_sbatch(daemon: Daemon, outdir: Path) -> None:
    """tbatch --test-only asks Slurm as the user, with the job the bridge would submit:
    the same estimate as sbatch's for the same script; nothing is submitted."""
    script = outdir / "probe.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N 2 --ntasks-per-node=1 -p debug -t 5\nhostname\n")
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--test-only",
                             str(script)], cwd=outdir, capture_output=True, text=True,
                            check=False, timeout=60)
    ours = daemon.cli("alice", "tbatch", "--test-only", str(script), cwd=outdir)
    assert theirs.returncode == 0 and ours.returncode == 0, (theirs.stderr, ours.stderr)
    a, b = _ESTIMATE.search(theirs.stderr), _ESTIMATE.search(ours.stderr)
    assert a and b, (theirs.stderr, ours.stderr)
    assert (a[3], a[5]) == (b[3], b[5]) == ("2", "debug"), (a[0], b[0])
    assert ours.stdout == "" and daemon.api("GET", "/v1/jobs").json()["items"] == []
    bad = daemon.cli("alice", "tbatch", "--test-only", "-p", "bogus", str(script), cwd=outdir)
    assert bad.returncode == 1 and "bogus" in bad.stderr, bad


def test_sbatch_timelimit_abc_is_refused_as_by_sbatch(daemon: Daemon, outdir: Path) -> None:
    script = outdir / "t.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 5\necho hi\n")
    env = {"SBATCH_TIMELIMIT": "abc"}
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "env", "SBATCH_TIMELIMIT=abc",
                             "sbatch", str(script)], cwd=outdir, capture_output=True,
                            text=True, check=False, timeout=60)
    # sbatch exits 255 for a bad option value; tbatch's user errors all exit 1.
    assert theirs.returncode == 255 and "Invalid --time specification" in theirs.stderr
    res = daemon.cli("alice", "tbatch", str(script), cwd=outdir, env=env)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.startswith("tbatch: error: invalid --time value 'abc' "
                                 "(from SBATCH_TIMELIMIT): "), res.stderr


def test_sbatch_partition_bogus_fails_as_with_sbatch(daemon: Daemon, outdir: Path) -> None:
    """The environment's partition reaches Slurm, which refuses it: tbatch fails (exit 1,
    no job) as sbatch does, naming the partition."""
    script = outdir / "p.sh"
    script.write_text("#!/bin/sh\n#SBATCH -p debug\necho hi\n")
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "env", "SBATCH_PARTITION=bogus",
                             "sbatch", str(script)], cwd=outdir, capture_output=True,
                            text=True, check=False, timeout=60)
    assert theirs.returncode != 0 and "bogus" in theirs.stderr, theirs.stderr
    res = daemon.cli("alice", "tbatch", str(script), cwd=outdir,
                     env={"SBATCH_PARTITION": "bogus"})
    assert (res.returncode, res.stdout) == (1, ""), (res.stdout, res.stderr)
    assert "bogus" in res.stderr, res.stderr


LATIN1 = b"#!/bin/bash\n# caf\xe9 na\xefve \xff\ncat \"$0\"\necho \"d\xe9j\xe0 vu\"\n"


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_a_latin1_script_runs_with_its_bytes_unchanged(
    fixture: str, request: pytest.FixtureRequest, outdir: Path
) -> None:
    """A script with Latin-1 bytes (not UTF-8) runs as sbatch runs it: the job's copy of
    the script and what it prints are the same bytes for tbatch and for sbatch."""
    d: Daemon = request.getfixturevalue(fixture)
    script = outdir / "latin.sh"
    script.write_bytes(LATIN1)
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--wait",
                             "--output=theirs.out", str(script)], cwd=outdir,
                            capture_output=True, check=False, timeout=120)
    assert theirs.returncode == 0, theirs.stderr
    res = d.cli("alice", "tbatch", "--parsable", "--output=ours.out", str(script), cwd=outdir)
    assert res.returncode == 0, res.stderr
    done = d.wait_state(res.stdout.strip(), ["Succeeded", "Failed"])
    assert done["state"] == "Succeeded", done
    expected = LATIN1 + "d\xe9j\xe0 vu\n".encode("latin-1")
    assert (outdir / "theirs.out").read_bytes() == expected
    assert (outdir / "ours.out").read_bytes() == expected


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon", "daemon_2411"])
def test_a_node_range_reaches_slurm_as_a_range(
    fixture: str, request: pytest.FixtureRequest, outdir: Path
) -> None:
    """``-N 1-2`` is a range in Slurm (as with sbatch), not exactly one node: Slurm's record
    of a pending job (``--begin``) is sbatch's (22.05 shows ``2-2`` for both once it has
    looked at the job: the maximum fits) and never ``1-1``."""
    d: Daemon = request.getfixturevalue(fixture)
    root = cluster_for("24.11").root if fixture == "daemon_2411" else None
    script = outdir / "range.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N 1-2 --begin=now+1hour -t 5\nhostname\n")
    res = d.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
    assert res.returncode == 0, res.stderr
    ours_id = d.wait_state(res.stdout.strip(), ["Submitted"])["backendId"]
    ids = [ours_id]
    try:
        ours = _scontrol(ours_id, root)["NumNodes"]
        assert ours in ("1-2", "2-2"), ours
        if root is None:
            theirs = _sbatch("alice", script, outdir)
            assert theirs.returncode == 0, theirs.stderr
            ids.append(theirs.stdout.strip().split(";")[0])
            assert _scontrol(ids[1])["NumNodes"] == ours
    finally:
        argv = ["scancel", *ids]
        subprocess.run(["chroot", root, *argv] if root else argv, check=False)


def test_flux_refuses_what_only_slurm_honours_at_admission(flux_daemon: Daemon,
                                                           outdir: Path) -> None:
    """On the real Flux bed: a job with options only Slurm honours, or a script that is not
    UTF-8, is refused before it is stored (400), naming each option and the back end."""
    script = outdir / "slurmy.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mail-type=END -N 1-2 --requeue\necho hi\n")
    res = flux_daemon.cli("alice", "tbatch", str(script), cwd=outdir)
    assert (res.returncode, res.stdout) == (1, ""), res
    for flag in ("--mail-type", "--requeue", "--nodes=MIN-MAX (a range, at most 2)"):
        # Each with its line, as tbatch's own refusals.
        assert f"{script}:2: {flag} is not supported by back end 'flux'" in res.stderr, (
            res.stderr)
    script.write_bytes(LATIN1)
    res = flux_daemon.cli("alice", "tbatch", str(script), cwd=outdir)
    assert res.returncode == 1, res
    assert "not UTF-8 text is not supported by back end 'flux'" in res.stderr, res.stderr
    assert flux_daemon.api("GET", "/v1/jobs").json()["items"] == []


@pytest.mark.parametrize(("fixture", "release"), [("daemon_2411", "24.11"),
                                                  ("daemon_2605", "26.05")])
def test_passed_options_go_through_slurmrestd_where_it_has_fields(
    fixture: str, release: str, request: pytest.FixtureRequest, outdir: Path
) -> None:
    """From v0.0.40 on, mail, requeue, open mode, memory per CPU and distribution are
    slurmrestd job fields: the job is submitted through REST (no sbatch) and Slurm's record
    shows them."""
    d: Daemon = request.getfixturevalue(fixture)
    root = cluster_for(release).root
    assert root is not None
    script = outdir / "rest.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mail-type=END,FAIL --mail-user=alice@example.org\n"
                      "#SBATCH --no-requeue --open-mode=append --mem-per-cpu=100 -m cyclic\n"
                      "#SBATCH --comment='my run 7' -t 5 --wckey=proj --tmp=0\nsleep 5\n")
    res = d.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
    assert res.returncode == 0, res.stderr
    ours_id = d.wait_state(res.stdout.strip(), ["Submitted", "Running", "Succeeded"])[
        "backendId"]
    try:
        ours = _scontrol(ours_id, root)
        assert (ours["MailUser"], ours["MailType"], ours["Requeue"]) == (
            "alice@example.org", "END,FAIL", "0")
        assert ours["MinMemoryCPU"] == "100M"
        assert re.fullmatch(r"hpc-bridge:\S+ my run 7", ours["Comment"]), ours["Comment"]
        assert "submitting it with sbatch instead" not in d.log.read_text()
    finally:
        subprocess.run(["chroot", root, "scancel", ours_id], check=False)


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_submit_dir_and_host_are_sbatchs(fixture: str, request: pytest.FixtureRequest,
                                          outdir: Path) -> None:
    """``cd $SLURM_SUBMIT_DIR`` works as with sbatch: the directory tbatch ran in (it
    was "/" through sbatch and empty through slurmrestd), and ``SLURM_SUBMIT_HOST``."""
    d: Daemon = request.getfixturevalue(fixture)
    sub = outdir / "sub"
    sub.mkdir()
    sub.chmod(0o777)
    wrap = "echo $SLURM_SUBMIT_DIR $SLURM_SUBMIT_HOST"
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-o",
                             f"{outdir}/theirs.out", "--wrap", wrap], cwd=sub,
                            capture_output=True, text=True, check=False, timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    res = d.cli("alice", "tbatch", "--parsable", "-o", f"{outdir}/ours.out", "--wrap", wrap,
                cwd=sub)
    assert res.returncode == 0, res.stderr
    assert d.wait_state(res.stdout.strip(), ["Succeeded", "Failed"])["state"] == "Succeeded"
    sbatch_id = theirs.stdout.strip().split(";")[0]
    wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", sbatch_id], capture_output=True,
                                        text=True, check=False).stdout.strip(), 120,
             "the sbatch job to end")
    wait_for(lambda: (outdir / "theirs.out").exists(), 30, "sbatch's output")
    ref = (outdir / "theirs.out").read_text()
    assert (outdir / "ours.out").read_text() == ref == f"{sub} {socket.gethostname()}\n"


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_a_plain_srun_starts_every_task_as_under_sbatch(
        fixture: str, request: pytest.FixtureRequest, outdir: Path) -> None:
    """sbatch puts ``SLURM_NTASKS``/``SLURM_NPROCS``, ``SLURM_NTASKS_PER_NODE`` and
    ``SLURM_CPUS_PER_TASK`` into the batch environment from its options; slurmrestd does
    not, and a plain ``srun`` then started one task per node (2 of 4)."""
    d: Daemon = request.getfixturevalue(fixture)
    script = outdir / "tasks.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 -c 1\n"
                      "env | grep -E '^SLURM_(NTASKS|NPROCS|CPUS_PER_TASK)' | sort\n"
                      "srun hostname | wc -l\n")
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--wait",
                             "-o", f"{outdir}/theirs.out", str(script)], cwd=outdir,
                            capture_output=True, text=True, check=False, timeout=120)
    assert theirs.returncode == 0, theirs.stderr
    res = d.cli("alice", "tbatch", "--parsable", "-o", f"{outdir}/ours.out", str(script),
                cwd=outdir)
    assert res.returncode == 0, res.stderr
    assert d.wait_state(res.stdout.strip(), ["Succeeded", "Failed"])["state"] == "Succeeded"
    ref = (outdir / "theirs.out").read_text()
    assert ref == ("SLURM_CPUS_PER_TASK=1\nSLURM_NPROCS=4\nSLURM_NTASKS=4\n"
                   "SLURM_NTASKS_PER_NODE=2\n4\n"), ref
    assert (outdir / "ours.out").read_text() == ref


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_the_submitters_umask_makes_the_output_files_as_sbatchs(
        fixture: str, request: pytest.FixtureRequest, outdir: Path) -> None:
    """alice submits with ``umask 077``: sbatch's output file is 0600, and tbatch's too
    (SLURM_UMASK, as sbatch sets it), through slurmrestd and through sbatch; with
    ``SLURM_UMASK=0022`` set by hand both give 0644."""
    d: Daemon = request.getfixturevalue(fixture)
    script = outdir / "u.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 5\necho hi\n")
    for setting, mode in (({}, 0o600), ({"SLURM_UMASK": "0022"}, 0o644)):
        theirs_out = outdir / f"sbatch-{mode:o}.out"
        old = os.umask(0o077)
        try:
            theirs = subprocess.run(
                ["runuser", "-u", "alice", "--", "env",
                 *[f"{k}={v}" for k, v in setting.items()], "sbatch", "--parsable", "-o",
                 str(theirs_out), str(script)],
                cwd=outdir, capture_output=True, text=True, check=False, timeout=60)
            res = d.cli("alice", "tbatch", "--parsable", "-o", f"tbatch-{mode:o}.out",
                        str(script), cwd=outdir, env=setting)
        finally:
            os.umask(old)
        assert theirs.returncode == 0, theirs.stderr
        assert res.returncode == 0, res.stderr
        d.wait_state(res.stdout.strip(), ["Succeeded"])
        ours_out = outdir / f"tbatch-{mode:o}.out"
        wait_for(lambda p=theirs_out: p.exists() and p.read_text() == "hi\n", 60,
                 "sbatch's job to write its output")
        assert (stat.S_IMODE(theirs_out.stat().st_mode), stat.S_IMODE(
            ours_out.stat().st_mode)) == (mode, mode), setting


def test_slurm_exit_error_is_an_errors_exit_status_as_sbatchs(daemon: Daemon,
                                                              outdir: Path) -> None:
    """SLURM_EXIT_ERROR=42: a partition Slurm refuses and a script that cannot be read
    exit 42 from sbatch and from tbatch. (An option sbatch cannot parse exits 255 from
    sbatch whatever the variable says, and 1 from tbatch: docs/slurm.md.)"""
    for args in (["-p", "bogus", "--wrap", "true"], ["missing.sh"]):
        theirs = subprocess.run(["runuser", "-u", "alice", "--", "env", "SLURM_EXIT_ERROR=42",
                                 "sbatch", *args], cwd=outdir, capture_output=True,
                                text=True, check=False, timeout=60)
        res = daemon.cli("alice", "tbatch", *args, cwd=outdir, env={"SLURM_EXIT_ERROR": "42"})
        assert (theirs.returncode, res.returncode) == (42, 42), (theirs.stderr, res.stderr)


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_output_name_patterns_are_sbatchs(fixture: str, request: pytest.FixtureRequest,
                                          outdir: Path) -> None:
    """``%x %u %N %n %t %% %j`` in an output name, through tbatch and sbatch on the same
    script: the same name but ``%j``, which is each tool's own id (tbatch's: the one it
    printed)."""
    d: Daemon = request.getfixturevalue(fixture)
    script = outdir / "pat.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J pat -t 5 -o o-%x-%u-%N-%n-%t-%%-%j.out\n"
                      "echo hi\n")
    theirs = _sbatch("alice", script, outdir)
    assert theirs.returncode == 0, theirs.stderr
    sbatch_id = theirs.stdout.strip().split(";")[0]
    res = d.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
    assert res.returncode == 0, res.stderr
    d.wait_state(res.stdout.strip(), ["Succeeded"])
    pattern = re.compile(r"o-pat-alice-node[1-4]-0-0-%-([0-9]+)\.out")

    def both() -> dict[str, str] | None:
        found = {m[1]: p.read_text() for p in outdir.glob("o-*")
                 if (m := pattern.fullmatch(p.name))}
        return found if len(found) == 2 and all(found.values()) else None

    files = wait_for(both, 60, "both output files")
    assert files == {sbatch_id: "hi\n", res.stdout.strip(): "hi\n"}, (
        sorted(p.name for p in outdir.iterdir()))
