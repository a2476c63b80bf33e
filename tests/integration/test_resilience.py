"""Crashes and outages lose no job and duplicate none (real Slurm, real daemon)."""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, slurm_bed_script, squeue_bridge_jobs, wait_for

pytestmark = pytest.mark.integration

# No script arguments, so that the burst goes through slurmrestd (the primary path).
QUICK = ("#!/bin/bash\n#SBATCH -N 1 -c 1\n#SBATCH -o q-%j.out\n"
         "echo job $SLURM_JOB_ID on $(hostname)\n")


def test_sigkill_mid_burst_of_50_makes_no_duplicate(daemon: Daemon, outdir: Path) -> None:
    script = outdir / "quick.sh"
    script.write_text(QUICK)
    ids: list[int] = []
    errors: list[str] = []

    def burst() -> None:
        for _ in range(50):
            res = daemon.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
            if res.returncode == 0:
                ids.append(int(res.stdout.strip()))
            else:
                errors.append(res.stderr)

    thread = threading.Thread(target=burst)
    thread.start()
    # Kill the daemon while submissions are flowing (some admitted, some in flight).
    wait_for(lambda: len(ids) >= 15, 120, "15 admitted jobs")
    daemon.kill()
    thread.join(300)
    daemon.start()  # same state dir, same socket
    # What failed while the daemon was down is submitted again, as a user would.
    # (A tbatch cut off mid-request may or may not have been admitted: the daemon's
    # own list below is the truth, not the ids the clients saw.)
    for _ in range(50 - len(ids)):
        res = daemon.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
        assert res.returncode == 0, res.stderr
        ids.append(int(res.stdout.strip()))
    assert len(set(ids)) == 50
    listed = daemon.api("GET", "/v1/jobs", params={"states": "all"}).json()["items"]
    all_ids = [j["id"] for j in listed]
    assert set(ids) <= set(all_ids) and len(all_ids) <= 50 + len(errors)
    done = {i: daemon.wait_state(i, ["Succeeded", "Failed", "Cancelled"], timeout=300)
            for i in all_ids}
    assert all(j["state"] == "Succeeded" for j in done.values()), [
        (i, j["state"], j["reason"], j["message"]) for i, j in done.items()
        if j["state"] != "Succeeded"]
    uids = {j["uid"] for j in done.values()}
    in_slurm = collections.Counter(j["comment"].removeprefix("hpc-bridge:")
                                   for j in squeue_bridge_jobs())
    ours = {u: n for u, n in in_slurm.items() if u in uids}
    assert set(ours) == uids, "every bridge job is known to Slurm"
    assert all(n == 1 for n in ours.values()), {u: n for u, n in ours.items() if n > 1}
    # Each job's output exists once (named by the bridge's id), from its own Slurm job.
    for job in done.values():
        text = Path(outdir / f"q-{job['id']}.out").read_text()
        assert text.startswith(f"job {job['backendId']} "), (job["id"], text)


def test_slurmrestd_down_for_30s_every_job_tracked_to_the_end(daemon: Daemon,
                                                              outdir: Path) -> None:
    # No script arguments: those go through sbatch (slurmrestd 22.05 cannot take them),
    # and this test is about the REST path.
    long, short = outdir / "long.sh", outdir / "short.sh"
    long.write_text("#!/bin/bash\n#SBATCH -N 1 -c 1\nsleep 15\necho done long\n")
    short.write_text("#!/bin/bash\n#SBATCH -N 1 -c 1\necho done short\n")
    before = [int(daemon.cli("alice", "tbatch", "--parsable", str(long), cwd=outdir).stdout)
              for _ in range(3)]
    for job_id in before:
        daemon.wait_state(job_id, ["Running", "Submitted"])
    slurm_bed_script("stop-rest")
    try:
        # Submitted while slurmrestd is down: admitted, waits with backoff.
        during = [int(daemon.cli("alice", "tbatch", "--parsable", str(short),
                                 cwd=outdir).stdout) for _ in range(2)]
        time.sleep(30)
        for job_id in during:
            job = daemon.job(job_id)
            assert job["state"] == "Pending", job
            assert job["reason"] == "BackendUnavailable", job
        for job_id in before:  # finished while we could not see them: still not final
            assert daemon.job(job_id)["state"] in ("Running", "Submitted")
    finally:
        slurm_bed_script("start-rest")
    for job_id in before + during:
        done = daemon.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=180)
        assert done["state"] == "Succeeded", json.dumps(done)[:2000]
    assert len({daemon.job(i)["backendId"] for i in before + during}) == 5
