"""When a job may start, end to end (issue 12): --dependency (tbatch's pipeline on the
real Slurm, jobs that can never start, a Slurm job that waits for a Flux job: one
daemon, both back ends) and --hold with tcontrol release.

Ordering is by conditions, never by sleeps: the first job waits for a file the test
writes only after it has seen the second one held."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings
from tests.integration.conftest_flux import flux_settings

pytestmark = pytest.mark.integration

TERMINAL = ["Succeeded", "Failed", "Cancelled"]


def tbatch(d: Daemon, *args: str, cwd: Path, user: str = "alice") -> int:
    res = d.cli(user, "tbatch", "--parsable", *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def gated(outdir: Path, name: str) -> str:
    """A command that waits until the test creates ``outdir/name``, then says so."""
    return f"while [ ! -e {outdir}/{name} ]; do sleep 0.2; done; echo {name} > {outdir}/{name}.done"


def with_reason(d: Daemon, ref: int, reason: str) -> dict[str, Any]:
    """The job once it shows ``reason``."""
    job: dict[str, Any] = wait_for(lambda: (j := d.job(ref))["reason"] == reason and j,
                                   120, f"job {ref} to show reason {reason}")
    return job


def open_gate(outdir: Path, name: str) -> None:
    (outdir / name).touch()


def test_afterok_pipeline_on_slurm(daemon: Daemon, outdir: Path) -> None:
    """jid=$(tbatch --parsable a.sh); tbatch --dependency=afterok:$jid b.sh"""
    first = tbatch(daemon, "--wrap", gated(outdir, "go"), cwd=outdir)
    second = tbatch(daemon, f"--dependency=afterok:{first}", "-o", "b-%j.out", "--wrap",
                    f"cat {outdir}/go.done", cwd=outdir)
    held = with_reason(daemon, second, "Dependency")
    assert held["state"] == "Pending" and held["backendId"] is None
    queue = daemon.cli("alice", "tqueue", "-h", "-j", str(second), "-o", "%i %t %R")
    assert queue.stdout.split() == [str(second), "PD", "(Dependency)"], queue
    show = daemon.cli("alice", "tshow", str(second)).stdout
    assert f"Dependency=afterok:{first} KillOInvalidDependent=No" in show, show
    open_gate(outdir, "go")
    done = daemon.wait_state(second, TERMINAL, timeout=180)
    assert done["state"] == "Succeeded", done
    assert (outdir / f"b-{second}.out").read_text() == "go\n"  # ran after a's end
    first_done = daemon.api("GET", f"/v1/jobs/{first}").json()
    assert first_done["endTime"] <= done["startTime"]


def test_a_dependency_that_can_never_be_met(daemon: Daemon, outdir: Path) -> None:
    failing = tbatch(daemon, "--wrap", "exit 3", cwd=outdir)
    waits = tbatch(daemon, "-d", f"afterok:{failing}", "--wrap", "true", cwd=outdir)
    killed = tbatch(daemon, "-d", f"afterok:{failing}", "--kill-on-invalid-dep=yes",
                    "--wrap", "true", cwd=outdir)
    runs = tbatch(daemon, "-d", f"afternotok:{failing}", "--wrap", "true", cwd=outdir)
    assert daemon.wait_state(failing, TERMINAL, timeout=180)["state"] == "Failed"
    assert daemon.wait_state(runs, TERMINAL, timeout=180)["state"] == "Succeeded"
    gone = daemon.wait_state(killed, TERMINAL)
    assert (gone["state"], gone["reason"]) == ("Cancelled", "DependencyNeverSatisfied")
    never = with_reason(daemon, waits, "DependencyNeverSatisfied")
    assert never["state"] == "Pending" and never["backendId"] is None
    assert daemon.cli("alice", "tcancel", str(waits)).returncode == 0
    assert daemon.wait_state(waits, TERMINAL)["state"] == "Cancelled"


def test_unknown_or_malformed_dependencies_are_refused(daemon: Daemon, outdir: Path) -> None:
    res = daemon.cli("alice", "tbatch", "-d", "afterok:99999999", "--wrap", "true", cwd=outdir)
    assert res.returncode == 1 and "job 99999999 does not exist" in res.stderr, res
    res = daemon.cli("alice", "tbatch", "-d", "afterok:1?afterany:2,afterok:3", "--wrap",
                     "true", cwd=outdir)
    assert res.returncode == 1 and "--dependency" in res.stderr and "mixed" in res.stderr, res
    assert daemon.api("GET", "/v1/jobs").json()["items"] == []  # nothing was stored


def test_hold_and_release_on_slurm(daemon: Daemon, outdir: Path) -> None:
    held = tbatch(daemon, "-H", "-o", "h-%j.out", "--wrap", "echo released", cwd=outdir)
    job = with_reason(daemon, held, "JobHeldUser")
    assert job["state"] == "Suspended" and job["backendId"] is None
    queue = daemon.cli("alice", "tqueue", "-h", "-j", str(held), "-o", "%i %t %R")
    assert queue.stdout.split() == [str(held), "PD", "(JobHeldUser)"], queue
    refused = daemon.cli("bob", "tcontrol", "release", str(held))
    assert refused.returncode == 1 and "Access/permission denied" in refused.stderr, refused
    assert daemon.job(held)["state"] == "Suspended"
    released = daemon.cli("alice", "tcontrol", "release", str(held))
    assert released.returncode == 0, released.stderr
    done = daemon.wait_state(held, TERMINAL, timeout=180)
    assert done["state"] == "Succeeded", done
    assert (outdir / f"h-{held}.out").read_text() == "released\n"
    again = daemon.cli("alice", "tcontrol", "hold", str(held))
    assert again.returncode == 1 and "no longer pending" in again.stderr, again


def test_roots_hold_binds_the_owner(daemon: Daemon, outdir: Path) -> None:
    """Root holds alice's waiting job (JobHeldAdmin): alice cannot release it; root can,
    and the job then waits for its dependency again."""
    first = tbatch(daemon, "--wrap", gated(outdir, "root-go"), cwd=outdir)
    waiting = tbatch(daemon, "-d", f"afterok:{first}", "--wrap", "true", cwd=outdir)
    with_reason(daemon, waiting, "Dependency")
    held = daemon.api("POST", f"/v1/jobs/{waiting}/hold")  # as root
    assert held.status_code == 202 and held.json()["reason"] == "JobHeldAdmin", held.text
    refused = daemon.cli("alice", "tcontrol", "release", str(waiting))
    assert refused.returncode == 1 and "administrator" in refused.stderr, refused
    assert daemon.cli("root", "tcontrol", "release", str(waiting)).returncode == 0
    with_reason(daemon, waiting, "Dependency")
    open_gate(outdir, "root-go")
    assert daemon.wait_state(waiting, TERMINAL, timeout=180)["state"] == "Succeeded"


@pytest.fixture
def slurm_and_flux(testbed: dict[str, str], flux_bed: dict[str, str]) -> Iterator[Daemon]:
    """One daemon, two worlds: Slurm (the default) and the Flux bed."""
    workdir = fresh_daemon_dir("slurm-flux")
    flux = "\n".join(f"{k} = {json.dumps(v)}" for k, v in flux_settings(flux_bed).items())
    d = Daemon(workdir, rest_settings(testbed),
               extra_toml=f'[backends.flux]\nkind = "flux"\n{flux}\n')
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


def test_a_slurm_job_waits_for_a_flux_job(slurm_and_flux: Daemon, outdir: Path) -> None:
    """The bridge holds the dependency itself, so it crosses worlds (issue 12 ★)."""
    d = slurm_and_flux
    on_flux = tbatch(d, "--backend", "flux", "--wrap", gated(outdir, "flux-go"), cwd=outdir)
    on_slurm = tbatch(d, "-d", f"afterany:{on_flux}", "-o", "s-%j.out", "--wrap",
                      f"cat {outdir}/flux-go.done", cwd=outdir)
    with_reason(d, on_slurm, "Dependency")
    assert d.wait_state(on_flux, ["Running"], timeout=120)["backend"] == "flux"
    open_gate(outdir, "flux-go")
    done = d.wait_state(on_slurm, TERMINAL, timeout=180)
    assert (done["state"], done["backend"]) == ("Succeeded", "slurm"), done
    assert (outdir / f"s-{on_slurm}.out").read_text() == "flux-go\n"
