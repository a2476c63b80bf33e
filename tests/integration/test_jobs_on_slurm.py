"""End to end on the real Slurm: tbatch → daemon → slurmrestd/sbatch → slurmd → output.

Every test here runs real jobs on the 4-node test beds, as the test users. Tests taking
the ``bed_daemon`` fixture run the same script on the Flux bed too; those parametrised
over ``DAEMONS`` run on Flux and on Slurm 22.05, 24.11 and 26.05.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, squeue_bridge_jobs
from tests.integration.conftest_slurm import cluster_for

pytestmark = pytest.mark.integration

#: The daemon fixtures the core cases run against: ``daemon`` (and ``cli_daemon``) on
#: Slurm 22.05, ``flux_daemon`` on the Flux bed, ``daemon_2411``/``daemon_2605`` on the
#: newer Slurm releases of testbed/slurm-versions.sh (REST version negotiated).
DAEMONS = ["daemon", "flux_daemon", "daemon_2411", "daemon_2605"]


def _cluster_root(fixture: str) -> str | None:
    release = {"daemon_2411": "24.11", "daemon_2605": "26.05"}.get(fixture)
    return cluster_for(release).root if release else None


def _node_pattern(fixture: str) -> str:
    return {"daemon_2411": r"trixie[1-4]", "daemon_2605": r"sid[1-4]"}.get(fixture,
                                                                           r"node[1-4]")

TWO_NODE_SCRIPT = """#!/bin/bash
#SBATCH --job-name=hello-two
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
#SBATCH --output=%x-%j.out
srun hostname | sort
echo "user=$(id -un) nodes=$SLURM_JOB_NUM_NODES id=$HPC_BRIDGE_JOB_ID args=$*"
"""


def submit(d: Daemon, user: str, script: Path, *args: str, cwd: Path) -> int:
    res = d.cli(user, "tbatch", str(script), *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", res.stdout)
    assert m, res.stdout
    return int(m.group(1))


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon", "daemon_2411", "daemon_2605"])
def test_two_node_job_runs_as_alice_with_output(
    fixture: str, request: pytest.FixtureRequest, outdir: Path
) -> None:
    d: Daemon = request.getfixturevalue(fixture)
    script = outdir / "hello.sh"
    script.write_text(TWO_NODE_SCRIPT)
    job_id = submit(d, "alice", script, "one", "two words", cwd=outdir)
    running_or_done = d.wait_state(job_id, ["Running", "Succeeded"])
    assert running_or_done["user"] == "alice"
    done = d.wait_state(job_id, ["Succeeded", "Failed"])
    assert done["state"] == "Succeeded", done
    assert done["exitCode"] == 0
    assert len(done["nodes"]) == 2
    assert all(re.fullmatch(_node_pattern(fixture), n) for n in done["nodes"]), done
    log = d.cli("alice", "tlog", str(job_id), cwd=outdir)
    assert log.returncode == 0, log.stderr
    lines = log.stdout.splitlines()
    assert lines[:2] == sorted(done["nodes"])
    assert lines[2] == f"user=alice nodes=2 id={job_id} args=one two words"
    # One id (bridge/jobid.py): %j in the file name is the id tbatch printed.
    out = outdir / f"hello-two-{job_id}.out"
    assert out.exists() and out.stat().st_uid == _uid("alice")
    # tqueue shows finished jobs with -t all, tshow the full record.
    q = d.cli("alice", "tqueue", "-t", "all", cwd=outdir)
    row = rf"^\s*{job_id}\s+debug\s+hello-tw\S*\s+alice\s+CD\b"
    assert re.search(row, q.stdout, re.M), q.stdout
    show = d.cli("alice", "tshow", str(job_id))
    assert "JobState=Succeeded" in show.stdout and "UserId=alice" in show.stdout, show.stdout
    assert f"BackendJobId={done['backendId']}" in show.stdout, show.stdout
    ids = d.cli("alice", "tqueue", "-h", "-j", str(job_id), "-o", "%i %T", "-O", "JobID")
    assert ids.returncode == 1 and "together" in ids.stderr, ids
    ids = d.cli("alice", "tqueue", "-h", "-j", str(job_id), "-O", "JobID:12,BackendJobId:12")
    assert ids.stdout.split() == [str(job_id), done["backendId"]], ids


def _uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


@pytest.mark.parametrize("fixture", DAEMONS)
def test_failing_job_reports_exit_code(fixture: str, request: pytest.FixtureRequest,
                                       outdir: Path) -> None:
    daemon: Daemon = request.getfixturevalue(fixture)
    script = outdir / "fail.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 1\necho about to fail\nexit 3\n")
    job_id = submit(daemon, "bob", script, cwd=outdir)
    done = daemon.wait_state(job_id, ["Succeeded", "Failed"])
    assert done["state"] == "Failed"
    assert done["exitCode"] == 3
    assert done["reason"] == "NonZeroExitCode"
    out = daemon.cli("bob", "tlog", str(job_id)).stdout
    if daemon.backend_kind == "flux":
        # As with flux batch, the script's nested broker logs its exit (rc=3) to stderr,
        # the same file, in no fixed order with the script's output.
        lines = out.splitlines()
        assert [ln for ln in lines if "broker.err" not in ln] == ["about to fail"], out
        assert any("Exited (rc=3)" in ln for ln in lines), out
    else:
        assert out == "about to fail\n"


@pytest.mark.parametrize("fixture", DAEMONS)
def test_cancel_running_job(fixture: str, request: pytest.FixtureRequest,
                            outdir: Path) -> None:
    daemon: Daemon = request.getfixturevalue(fixture)
    script = outdir / "sleepy.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 1\necho started\nsleep 300\n")
    job_id = submit(daemon, "alice", script, cwd=outdir)
    daemon.wait_state(job_id, ["Running"])
    # bob may not cancel alice's job; alice may.
    denied = daemon.cli("bob", "tcancel", str(job_id))
    assert denied.returncode != 0 and "permission denied" in denied.stderr.lower()
    ok = daemon.cli("alice", "tcancel", str(job_id))
    assert ok.returncode == 0, ok.stderr
    done = daemon.wait_state(job_id, ["Cancelled", "Failed", "Succeeded"], timeout=60)
    assert done["state"] == "Cancelled" and done["reason"] == "Cancelled"
    if daemon.backend_kind == "flux":
        return  # test_flux_jobs.py::test_exit_code_and_cancel asks Flux itself
    assert not [j for j in squeue_bridge_jobs(_cluster_root(fixture))
                if str(j["job_id"]) == done["backendId"]
                and "RUNNING" in (j["job_state"] if isinstance(j["job_state"], list)
                                  else [j["job_state"]])]


def test_cancel_pending_job_before_it_runs(bed_daemon: Daemon, outdir: Path) -> None:
    daemon = bed_daemon
    script = outdir / "big.sh"
    # Asks for all four nodes exclusively after a blocker holds one: stays pending.
    blocker = outdir / "blocker.sh"
    blocker.write_text("#!/bin/bash\n#SBATCH -N 4 --exclusive\nsleep 60\n")
    script.write_text("#!/bin/bash\n#SBATCH -N 4 --exclusive\necho never\n")
    first = submit(daemon, "alice", blocker, cwd=outdir)
    # The blocker holds the nodes first: two jobs due at once go to Slurm in parallel
    # (max_parallel_submits), in either order.
    daemon.wait_state(first, ["Running"])
    second = submit(daemon, "alice", script, cwd=outdir)
    daemon.wait_state(second, ["Submitted"])
    assert daemon.cli("alice", "tcancel", str(second), str(first)).returncode == 0
    assert daemon.wait_state(second, ["Cancelled"], timeout=60)["state"] == "Cancelled"
    assert daemon.wait_state(first, ["Cancelled"], timeout=60)["state"] == "Cancelled"
