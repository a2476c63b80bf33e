"""When a job may start, end to end (issue 12): --dependency (tbatch's pipeline on the
real Slurm, jobs that can never start, a Slurm job that waits for a Flux job: one
daemon, both back ends; and across Slurm and the Kubernetes bed) and --hold with
tcontrol release.

A dependency naming only jobs already in the same Slurm is handed to Slurm in its ids
(squeue shows it); others are held by the bridge. Ordering is by conditions, never by
sleeps: the first job waits for a file the test writes only after it has seen the
second one held."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings
from tests.integration.conftest_flux import flux_settings
from tests.integration.k8s_bridge import k8s_daemon
from tests.integration.k8s_users import users_namespace
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration

TERMINAL = ["Succeeded", "Failed", "Cancelled"]


def tbatch(d: Daemon, *args: str, cwd: Path, user: str = "alice") -> int:
    res = d.cli(user, "tbatch", "--parsable", *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def gated(outdir: Path, name: str) -> str:
    """A command that waits until the test creates ``outdir/name``, then says so (or
    until ``outdir`` is gone: a failed test leaves no job running)."""
    return (f"while [ -d {outdir} ] && [ ! -e {outdir}/{name} ]; do sleep 0.2; done; "
            f"echo {name} > {outdir}/{name}.done")


def with_reason(d: Daemon, ref: int, reason: str) -> dict[str, Any]:
    """The job once it shows ``reason``."""
    job: dict[str, Any] = wait_for(lambda: (j := d.job(ref))["reason"] == reason and j,
                                   120, f"job {ref} to show reason {reason}")
    return job


def open_gate(outdir: Path, name: str) -> None:
    (outdir / name).touch()


def slurm_view(job_id: str) -> list[str]:
    """Slurm's own ``squeue`` of one job: its dependency and its reason."""
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%E %r"], capture_output=True,
                         text=True, timeout=30, check=True)
    return out.stdout.split()


def test_afterok_pipeline_on_slurm(daemon: Daemon, outdir: Path) -> None:
    """jid=$(tbatch --parsable a.sh); tbatch --dependency=afterok:$jid b.sh: a job in the
    same Slurm is waited for by Slurm itself, in Slurm's ids (squeue shows the pipeline)."""
    first = tbatch(daemon, "--wrap", gated(outdir, "go"), cwd=outdir)
    slurm_first = daemon.wait_state(first, ["Submitted", "Running"])["backendId"]
    second = tbatch(daemon, f"--dependency=afterok:{first}", "-o", "b-%j.out", "--wrap",
                    f"cat {outdir}/go.done", cwd=outdir)
    # Held by the bridge until the daemon has read Slurm's whole status once, then
    # handed over: wait for what is asserted.
    queued: dict[str, Any] = wait_for(
        lambda: ((j := daemon.job(second))["state"] == "Submitted"
                 and j["reason"] == "Dependency" and j), 120, "the job handed to Slurm")
    assert queued["backendId"], queued
    assert slurm_view(queued["backendId"]) == [f"afterok:{slurm_first}(unfulfilled)",
                                               "Dependency"]
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
    """Held by the bridge (the failing job is not in Slurm yet: it is held) and handed
    to Slurm (it is), the answers are sbatch's: DependencyNeverSatisfied, Pending until
    cancelled, or cancelled with --kill-on-invalid-dep=yes."""
    failing = tbatch(daemon, "-H", "--wrap", f"{gated(outdir, 'fail')}; exit 3", cwd=outdir)
    early = tbatch(daemon, "-d", f"afterok:{failing}", "--wrap", "true", cwd=outdir)
    early_killed = tbatch(daemon, "-d", f"afterok:{failing}", "--kill-on-invalid-dep=yes",
                          "--wrap", "true", cwd=outdir)
    for job in (early, early_killed):
        assert with_reason(daemon, job, "Dependency")["backendId"] is None
    assert daemon.cli("alice", "tcontrol", "release", str(failing)).returncode == 0
    daemon.wait_state(failing, ["Running"], timeout=120)
    late = tbatch(daemon, "-d", f"afterok:{failing}", "--wrap", "true", cwd=outdir)
    late_killed = tbatch(daemon, "-d", f"afterok:{failing}", "--kill-on-invalid-dep=yes",
                         "--wrap", "true", cwd=outdir)
    runs = tbatch(daemon, "-d", f"afternotok:{failing}", "--wrap", "true", cwd=outdir)
    for job in (late, late_killed, runs, early, early_killed):  # all go to Slurm now
        wait_for(lambda job=job: daemon.job(job)["backendId"], 120, f"job {job} in Slurm")
    open_gate(outdir, "fail")
    assert daemon.wait_state(failing, TERMINAL, timeout=180)["state"] == "Failed"
    assert daemon.wait_state(runs, TERMINAL, timeout=180)["state"] == "Succeeded"
    for job in (early_killed, late_killed):
        gone = daemon.wait_state(job, TERMINAL)
        assert (gone["state"], gone["reason"]) == ("Cancelled", "DependencyNeverSatisfied")
    for job in (early, late):
        never = with_reason(daemon, job, "DependencyNeverSatisfied")
        assert never["state"] == "Submitted", never
        assert slurm_view(never["backendId"])[-1] == "DependencyNeverSatisfied"
        assert daemon.cli("alice", "tcancel", str(job)).returncode == 0
        assert daemon.wait_state(job, TERMINAL)["state"] == "Cancelled"


def test_a_failed_jobs_dependents_wait_in_the_bridge(daemon: Daemon, outdir: Path) -> None:
    """A job that already failed is not named to Slurm: the bridge answers at once."""
    failing = tbatch(daemon, "--wrap", "exit 3", cwd=outdir)
    assert daemon.wait_state(failing, TERMINAL, timeout=180)["state"] == "Failed"
    waits = tbatch(daemon, "-d", f"afterok:{failing}", "--wrap", "true", cwd=outdir)
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


def test_hold_and_release_in_slurms_queue(daemon: Daemon, outdir: Path) -> None:
    """tcontrol hold of a job already waiting in Slurm holds it there (scontrol hold as
    its owner: Slurm's JobHeldUser); bob may neither hold nor release it; root's hold is
    Slurm's JobHeldAdmin, which alice cannot release; released, Slurm's own reason is
    back. tqueue shows what squeue shows."""
    job = tbatch(daemon, "--begin=now+1hour", "--wrap", "true", cwd=outdir)
    slurm_id = with_reason(daemon, job, "BeginTime")["backendId"]
    assert slurm_id and slurm_view(slurm_id) == ["(null)", "BeginTime"]
    refused = daemon.cli("bob", "tcontrol", "hold", str(job))
    assert refused.returncode == 1 and "Access/permission denied" in refused.stderr, refused
    assert daemon.cli("alice", "tcontrol", "hold", str(job)).returncode == 0
    held = with_reason(daemon, job, "JobHeldUser")
    assert held["state"] == "Submitted" and held["backendId"] == slurm_id, held
    assert slurm_view(slurm_id) == ["(null)", "JobHeldUser"]
    queue = daemon.cli("alice", "tqueue", "-h", "-j", str(job), "-o", "%i %t %R")
    assert queue.stdout.split() == [str(job), "PD", "(JobHeldUser)"], queue
    refused = daemon.cli("bob", "tcontrol", "release", str(job))
    assert refused.returncode == 1 and "Access/permission denied" in refused.stderr, refused
    assert daemon.cli("root", "tcontrol", "hold", str(job)).returncode == 0
    with_reason(daemon, job, "JobHeldAdmin")
    assert slurm_view(slurm_id) == ["(null)", "JobHeldAdmin"]
    refused = daemon.cli("alice", "tcontrol", "release", str(job))
    assert refused.returncode == 1 and "administrator" in refused.stderr, refused
    refused = daemon.cli("alice", "tcontrol", "resume", str(job))
    assert refused.returncode == 1 and "release it" in refused.stderr, refused
    assert daemon.cli("root", "tcontrol", "release", str(job)).returncode == 0
    assert with_reason(daemon, job, "BeginTime")["state"] == "Submitted"
    assert slurm_view(slurm_id) == ["(null)", "BeginTime"]
    assert daemon.cli("alice", "tcancel", str(job)).returncode == 0
    assert daemon.wait_state(job, TERMINAL)["state"] == "Cancelled"


def test_roots_hold_binds_the_owner(daemon: Daemon, outdir: Path) -> None:
    """Root holds alice's waiting job (JobHeldAdmin): alice cannot release it; root can,
    and the job then waits for its dependency again (the bridge's: the job it waits for
    is held, not in Slurm; once that one is released, Slurm's)."""
    first = tbatch(daemon, "-H", "--wrap", "true", cwd=outdir)
    waiting = tbatch(daemon, "-d", f"afterok:{first}", "--wrap", "true", cwd=outdir)
    with_reason(daemon, waiting, "Dependency")
    held = daemon.api("POST", f"/v1/jobs/{waiting}/hold")  # as root
    assert held.status_code == 202 and held.json()["reason"] == "JobHeldAdmin", held.text
    refused = daemon.cli("alice", "tcontrol", "release", str(waiting))
    assert refused.returncode == 1 and "administrator" in refused.stderr, refused
    assert daemon.cli("root", "tcontrol", "release", str(waiting)).returncode == 0
    assert with_reason(daemon, waiting, "Dependency")["backendId"] is None
    assert daemon.cli("alice", "tcontrol", "release", str(first)).returncode == 0
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


@pytest.fixture
def slurm_and_k8s(k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]
                  ) -> Iterator[Daemon]:
    """One daemon, two worlds: Kubernetes (alice mapped to the test namespace) and the
    Slurm bed."""
    users_namespace(k8s, k8s_namespace)
    d = k8s_daemon(k8s, k8s_namespace, slurm=testbed)
    d.backend_settings.update({"users.alice.namespace": k8s_namespace,
                               "users.alice.service_account": "alice",
                               "default_image": "busybox:1.36", "placement": "constraints"})
    d.start()
    yield d
    d.stop()
    cleanup(d.workdir)


def test_dependencies_cross_slurm_and_kubernetes(slurm_and_k8s: Daemon, outdir: Path
                                                 ) -> None:
    """On the Kubernetes bed: a JobSet waits for a Slurm job, and a Slurm job for a
    Kubernetes array (every task), the bridge holding each until its dependency is met."""
    d = slurm_and_k8s
    on_slurm = tbatch(d, "--backend", "slurm", "--wrap", gated(outdir, "k8s-go"), cwd=outdir)
    pod = tbatch(d, "--backend", "kubernetes", "-d", f"afterok:{on_slurm}", "--wrap",
                 "echo after slurm", cwd=d.workdir)
    held = with_reason(d, pod, "Dependency")
    assert held["backendId"] is None
    array = tbatch(d, "--backend", "kubernetes", "--array=0-1", "--wrap", "true",
                   cwd=d.workdir)
    after_array = tbatch(d, "--backend", "slurm", "-d", f"afterok:{array}", "-o",
                         f"{outdir}/after-array.out", "--wrap", "echo after the array",
                         cwd=outdir)
    done = d.wait_state(after_array, TERMINAL, timeout=180)
    assert done["state"] == "Succeeded", done
    tasks = [d.job(f"{array}_{i}") for i in (0, 1)]
    assert all(t["state"] == "Succeeded" for t in tasks), tasks
    assert done["startTime"] >= max(t["endTime"] for t in tasks)
    assert d.job(pod)["reason"] == "Dependency"  # its Slurm job still waits for the gate
    open_gate(outdir, "k8s-go")
    ran = d.wait_state(pod, TERMINAL, timeout=180)
    assert (ran["state"], ran["backend"]) == ("Succeeded", "kubernetes"), ran


def _sbatch(outdir: Path, *args: str) -> str:
    """Real sbatch as alice: its Slurm id."""
    res = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-o",
                          "/dev/null", *args], cwd=outdir, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def _slurm_state(job_id: str) -> tuple[str, str]:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    fields = dict(re.findall(r"(\S+?)=(\S*)", out))
    return fields["JobState"], fields["Reason"]


def test_singleton_and_lists_of_conditions_as_sbatchs(daemon: Daemon, outdir: Path
                                                      ) -> None:
    """The same dependencies through tbatch and real sbatch on the same Slurm, with the
    same outcomes: ``singleton`` waits for the running job of its name (held by the
    bridge: Slurm cannot see the bridge's held jobs); ``afterok:A?afterok:B`` (any) runs
    once one is met; ``afterok:A,afterok:B`` (all) can never be met once A failed."""
    solo = tbatch(daemon, "-J", "solo", "--wrap", gated(outdir, "solo"), cwd=outdir)
    daemon.wait_state(solo, ["Running"], timeout=120)
    ours = tbatch(daemon, "-J", "solo", "-d", "singleton", "--wrap", "true", cwd=outdir)
    theirs = _sbatch(outdir, "-J", "solo", "-d", "singleton", "--wrap", "true")
    assert with_reason(daemon, ours, "Dependency")["backendId"] is None
    wait_for(lambda: _slurm_state(theirs) == ("PENDING", "Dependency"), 60,
             "sbatch's singleton to wait")
    open_gate(outdir, "solo")
    assert daemon.wait_state(ours, TERMINAL, timeout=180)["state"] == "Succeeded"
    wait_for(lambda: _slurm_state(theirs)[0] == "COMPLETED", 120, "sbatch's singleton")
    assert daemon.job(ours)["startTime"] >= daemon.job(solo)["endTime"]

    fails = tbatch(daemon, "--wrap", f"{gated(outdir, 'f')}; exit 1", cwd=outdir)
    works = tbatch(daemon, "--wrap", gated(outdir, "w"), cwd=outdir)
    ids = {j: daemon.wait_state(j, ["Submitted", "Running"])["backendId"]
           for j in (fails, works)}
    any_ours = tbatch(daemon, "-d", f"afterok:{fails}?afterok:{works}", "--wrap", "true",
                      cwd=outdir)
    all_ours = tbatch(daemon, "-d", f"afterok:{fails},afterok:{works}", "--wrap", "true",
                      cwd=outdir)
    any_theirs = _sbatch(outdir, "-d", f"afterok:{ids[fails]}?afterok:{ids[works]}",
                         "--wrap", "true")
    all_theirs = _sbatch(outdir, "-d", f"afterok:{ids[fails]},afterok:{ids[works]}",
                         "--wrap", "true")
    open_gate(outdir, "f")
    assert daemon.wait_state(fails, TERMINAL, timeout=180)["state"] == "Failed"
    open_gate(outdir, "w")
    assert daemon.wait_state(any_ours, TERMINAL, timeout=180)["state"] == "Succeeded"
    wait_for(lambda: _slurm_state(any_theirs)[0] == "COMPLETED", 120, "sbatch's any-of")
    assert with_reason(daemon, all_ours, "DependencyNeverSatisfied")["state"] in (
        "Pending", "Submitted")
    wait_for(lambda: _slurm_state(all_theirs) == ("PENDING", "DependencyNeverSatisfied"),
             120, "sbatch's all-of to be never satisfied")
    assert daemon.cli("alice", "tcancel", str(all_ours)).returncode == 0
    subprocess.run(["scancel", all_theirs], check=False, timeout=30)
