"""Ownership on Flux as a hostile user tries it: bob submits, in his own name, a Flux job
carrying alice's TrainJob uid (``attributes.user.hpc_bridge_uid`` and the job name the
bridge gives) while hers runs, and his ends first with exit 0. Her job must keep its
own Flux job's state, exit code and output (docs/security.md, forged back-end key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.bed import Daemon, trainjob_doc
from tests.integration.conftest_flux import flux_as
from tests.integration.test_flux_jobs import finished
from tests.integration.test_multiuser_safety import api_as

pytestmark = pytest.mark.integration


def test_bobs_flux_job_with_alices_key_is_not_adopted(
        flux_daemon: Daemon, flux_bed: dict[str, str], outdir: Path) -> None:
    doc = trainjob_doc(outdir, "forged-key", "plain",
                       ["sh", "-c", "id -un; sleep 6; exit 3"])
    status, job = api_as(flux_daemon, "alice", "POST", "/v1/jobs", doc)
    assert status == 201, job
    running = flux_daemon.wait_state(job["id"], ["Running"])
    uid = job["uid"]  # tqueue shows it to everyone
    forged = flux_as(flux_bed, "bob", "submit", f"--job-name=x.hpc-bridge-{uid}",
                     f"--setattr=user.hpc_bridge_uid={uid}", "sh", "-c", "id -un")
    assert forged.returncode == 0, forged.stderr
    bobs = forged.stdout.strip()
    waited = flux_as(flux_bed, "bob", "job", "wait-event", bobs, "clean")
    assert waited.returncode == 0, waited.stderr
    done, out = finished(flux_daemon, job["id"])
    assert done["state"] == "Failed" and done["exitCode"] == 3, done
    assert done["backendId"] == running["backendId"] != bobs, done
    assert out.split() == ["alice"], out
