"""Suspend and resume a job Slurm runs (``tcontrol suspend/resume``, ``spec.suspend``),
on each Slurm release and path.

The bridge suspends a job in Slurm as Kubernetes suspends a JobSet: the job leaves its
nodes (``scontrol requeuehold`` as its owner, ``scontrol hold`` while it still waits)
and is shown ``Running`` with reason ``BackendSuspended``; resume releases it (Slurm
starts a requeued job again after its EligibleTime, ~2 minutes: not waited for here).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, wait_for
from tests.integration.conftest_slurm import cluster_for

pytestmark = pytest.mark.integration

RELEASE = {"daemon": "22.05", "cli_daemon": "22.05", "daemon_2411": "24.11",
           "daemon_2605": "26.05"}


def slurm_view(release: str, backend_id: str) -> str:
    """``STATE REASON`` of the job as squeue shows it in its cluster."""
    argv = cluster_for(release).command(["squeue", "-h", "-j", backend_id, "-o", "%T %r"])
    return subprocess.run(argv, capture_output=True, text=True, check=False,
                          timeout=30).stdout.strip()


@pytest.mark.parametrize("fixture", list(RELEASE))
def test_a_running_job_is_suspended_off_its_nodes_and_resumed(
        fixture: str, request: pytest.FixtureRequest, outdir: Path) -> None:
    d: Daemon = request.getfixturevalue(fixture)
    release = RELEASE[fixture]
    go = outdir / "go"
    res = d.cli("alice", "tbatch", "--parsable", "-t", "5", "-o", f"{outdir}/s-%j.out",
                "--wrap", f"while [ ! -e {go} ]; do sleep 0.2; done", cwd=outdir)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip()
    try:
        backend_id = d.wait_state(job, ["Running"])["backendId"]
        bob = d.cli("bob", "tcontrol", "suspend", job)
        assert bob.returncode != 0 and "denied" in bob.stderr.lower(), bob
        assert slurm_view(release, backend_id).startswith("RUNNING")

        res = d.cli("alice", "tcontrol", "suspend", job)
        assert res.returncode == 0, res.stderr
        wait_for(lambda: d.job(job)["reason"] == "BackendSuspended", 60,
                 "the bridge to show the job suspended")
        # squeue's %r: its description, "job requeued in held state" (JobHeldUser)
        assert slurm_view(release, backend_id) == "PENDING job requeued in held state"
        assert d.job(job)["state"] == "Running"

        res = d.cli("alice", "tcontrol", "resume", job)
        assert res.returncode == 0, res.stderr
        wait_for(lambda: d.job(job)["reason"] not in ("BackendSuspended", "Suspended"), 60,
                 "the bridge to show the job resumed")
        shown = slurm_view(release, backend_id)
        assert shown.startswith(("PENDING", "RUNNING")) and "held" not in shown, shown
    finally:
        go.touch()
        d.cli("alice", "tcancel", job)
    assert d.wait_state(job, ["Cancelled", "Succeeded"])["state"] in ("Cancelled", "Succeeded")


def test_a_waiting_job_is_held_and_a_job_slurm_will_not_requeue_is_refused(
        daemon: Daemon, outdir: Path) -> None:
    """Still pending in Slurm: ``scontrol hold`` (it stays Submitted, never Running);
    ``--no-requeue``: Slurm refuses, the job keeps running and its reason says why."""
    d = daemon
    later = d.cli("alice", "tbatch", "--parsable", "--begin=now+3600", "-o", "/dev/null",
                  "--wrap", "true", cwd=outdir)
    go = outdir / "go"
    fixed = d.cli("alice", "tbatch", "--parsable", "--no-requeue", "-t", "5", "-o",
                  "/dev/null", "--wrap", f"while [ ! -e {go} ]; do sleep 0.2; done",
                  cwd=outdir)
    assert later.returncode == 0 and fixed.returncode == 0, (later.stderr, fixed.stderr)
    waiting, running = later.stdout.strip(), fixed.stdout.strip()
    try:
        backend_id = d.wait_state(waiting, ["Submitted"])["backendId"]
        d.wait_state(running, ["Running"])
        for job in (waiting, running):
            res = d.cli("alice", "tcontrol", "suspend", job)
            assert res.returncode == 0, res.stderr
        wait_for(lambda: d.job(waiting)["reason"] == "BackendSuspended", 60,
                 "the waiting job to show held")
        shown = d.job(waiting)
        assert shown["state"] == "Submitted" and shown["startTime"] is None, shown
        assert slurm_view("22.05", backend_id) == "PENDING JobHeldUser"
        wait_for(lambda: d.job(running)["reason"] == "SuspendRefused", 60,
                 "the refusal to show")
        shown = d.job(running)
        assert shown["state"] == "Running", shown
        assert "presently disabled" in shown["message"], shown
        res = d.cli("alice", "tcontrol", "resume", waiting)
        assert res.returncode == 0, res.stderr
        wait_for(lambda: "JobHeld" not in slurm_view("22.05", backend_id), 60,
                 "Slurm to release the waiting job")
        wait_for(lambda: d.job(waiting)["reason"] != "BackendSuspended", 60,
                 "the bridge to show it waiting again")
        assert d.job(waiting)["state"] == "Submitted"
    finally:
        go.touch()
        d.cli("alice", "tcancel", waiting, running)
