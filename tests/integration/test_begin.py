"""``--begin`` on every back end (issue 12): Slurm reads it itself; on Flux and
Kubernetes the bridge holds the job until then. Either way the job waits Pending with
squeue's reason ``BeginTime`` and starts no earlier."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, wait_for
from tests.integration.k8s_bridge import jobsets
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration

WAIT = 8  # seconds


def _begin_and_check(d: Daemon, cwd: Path, *backend: str) -> dict[str, object]:
    before = time.time()
    res = d.cli("alice", "tbatch", "--parsable", *backend, f"--begin=now+{WAIT}", "-t", "5",
                "--wrap", "true", cwd=cwd)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    held = wait_for(lambda: (j := d.job(job_id))["reason"] == "BeginTime" and j, 30,
                    "the job to wait for its begin time")
    # Held by the bridge: Pending; in Slurm's queue: Submitted, Slurm's reason.
    assert held["state"] in ("Pending", "Submitted"), held
    queue = d.cli("alice", "tqueue", "-h", "-j", job_id, "-o", "%i %t %R").stdout.split()
    assert queue == [job_id, "PD", "(BeginTime)"], queue
    done = d.wait_state(job_id, ["Succeeded", "Failed"], timeout=120)
    assert done["state"] == "Succeeded", done
    started = datetime.fromisoformat(str(done["startTime"] or next(
        t["at"] for t in done["transitions"] if t["to"] in ("Running", "Succeeded")))
    ).timestamp()  # kwok may end a pod before the bridge sees it run
    assert started >= before + WAIT - 1, (before, done)
    return held


def test_a_job_waits_for_its_begin_on_slurm_and_flux(bed_daemon: Daemon, outdir: Path
                                                     ) -> None:
    held = _begin_and_check(bed_daemon, outdir)
    if bed_daemon.backend_kind == "flux":  # held by the bridge: not in Flux before then
        assert held["backendId"] is None and "(--begin)" in str(held["message"]), held


def test_a_job_waits_for_its_begin_on_kubernetes(k8s: K8sBed, k8s_namespace: str,
                                                 k8s_alice: Daemon) -> None:
    held = _begin_and_check(k8s_alice, k8s_alice.workdir, "--backend", "kubernetes")
    assert held["backendId"] is None, held
    assert len(jobsets(k8s, k8s_namespace)) == 1  # made once the time came
