"""End to end on the real Flux bed: tbatch → daemon → Flux (multi-user, IMP) → output.

The bed (``testbed/flux.sh up``) is a four-broker instance whose brokers look like four
hosts, owned by the system user ``flux``; the daemon runs as root and submits each job
as its owner (``flux job submit`` run as alice or bob, signed with munge), so the IMP
runs it as that user. Under ``CI=true`` a missing bed fails these tests.

Covered here: ``mpirun`` inside a Flux job (Open MPI's ``pmix/flux`` component must be
kept off), cancel, the daemon SIGKILLed mid-run, jobs run as their owners, Flux's own
reasons in the job's message, and the adapter's log lines as JSON. The job scripts and
TrainJobs shared with Slurm (2-node MPI with ranks started by Flux, torch on two nodes
with node ranks 0 and 1, exit codes, cancelling running and pending jobs) run on Flux
through the ``bed_daemon`` fixture of test_jobs_on_slurm.py and
test_runtimes_on_slurm.py; there, as here, the submitter's PATH holds no ``flux``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup, trainjob_doc, wait_for
from tests.integration.conftest_flux import flux_as, flux_daemon_for

pytestmark = pytest.mark.integration

PYTHON = str(Path(sys.executable))
TERMINAL = ["Succeeded", "Failed", "Cancelled"]

ALLREDUCE = """
import os, socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank)
os.write(1, (f"rank={comm.rank} size={comm.size} sum={total} host={socket.gethostname()} "
             f"world={os.environ.get('MPI_LAUNCH_WORLD')}\\n").encode())
"""

def tbatch(d: Daemon, user: str, *args: str, cwd: Path) -> int:
    res = d.cli(user, "tbatch", "--parsable", *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def trainjob(d: Daemon, outdir: Path, name: str, runtime: str, command: list[str], *,
             nodes: int = 1, procs: int = 1, user: str = "alice") -> int:
    path = outdir / f"{name}.json"
    path.write_text(json.dumps(trainjob_doc(outdir, name, runtime, command, nodes=nodes,
                                            procs=procs)))
    return tbatch(d, user, "-f", str(path), cwd=outdir)


def finished(d: Daemon, job_id: int, user: str = "alice",
             timeout: float = 180) -> tuple[dict[str, Any], str]:
    done = d.wait_state(job_id, TERMINAL, timeout=timeout)
    return done, d.cli(user, "tlog", str(job_id)).stdout


def records(out: str) -> list[dict[str, str]]:
    return [dict(kv.split("=", 1) for kv in line.split()) for line in out.splitlines()
            if line.startswith("rank=")]


def flux_jobs_with_uid(bed: dict[str, str], uid: str) -> list[dict[str, Any]]:
    """Every job of the instance whose name carries the TrainJob uid (as the owner)."""
    done = flux_as(bed, bed["FLUX_OWNER"], "jobs", "-a", "-A", "--json")
    assert done.returncode == 0, done.stderr
    jobs: list[dict[str, Any]] = json.loads(done.stdout)["jobs"]
    return [j for j in jobs if str(j.get("name", "")).endswith(f".hpc-bridge-{uid}")]


def test_mpirun_inside_a_flux_job(flux_daemon: Daemon, outdir: Path) -> None:
    """Open MPI's mpirun, run by the job itself: its pmix/flux component segfaults under
    Flux unless the job's environment switches it off (OMPI_MCA_pmix=^flux)."""
    prog = outdir / "allreduce.py"
    prog.write_text(ALLREDUCE)
    job_id = trainjob(flux_daemon, outdir, "mpirun", "mpi-distributed",
                      ["mpirun", PYTHON, str(prog)], nodes=1, procs=2)
    done, out = finished(flux_daemon, job_id)
    assert done["state"] == "Succeeded", (done, out)
    ranks = records(out)
    assert sorted(int(r["rank"]) for r in ranks) == [0, 1], out
    assert {r["sum"] for r in ranks} == {"1"}, out


def test_jobs_run_as_their_owners(flux_daemon: Daemon, outdir: Path) -> None:
    ids = {user: tbatch(flux_daemon, user, "-N", "2", "--wrap",
                        "flux run -N2 -n2 sh -c 'echo $(id -un) $(hostname)' | sort",
                        cwd=outdir) for user in ("alice", "bob")}
    for user, job_id in ids.items():
        done, out = finished(flux_daemon, job_id, user=user)
        assert done["state"] == "Succeeded" and done["user"] == user, (done, out)
        lines = out.split()
        assert lines[0::2] == [user, user] and len(set(lines[1::2])) == 2, out
        # bob cannot read alice's output through the bridge, nor she his.
        other = "bob" if user == "alice" else "alice"
        denied = flux_daemon.cli(other, "tlog", str(job_id))
        assert denied.returncode != 0, denied.stdout


def test_one_id_in_output_names_and_environment(flux_daemon: Daemon, outdir: Path) -> None:
    """The id tbatch prints is the one in the file name (%j, padded %5J) and in
    HPC_BRIDGE_JOB_ID; Flux's own id is only the back end's (tshow BackendJobId=)."""
    job_id = tbatch(flux_daemon, "alice", "-o", "one-%j.%5J.out", "--wrap",
                    "echo id=$HPC_BRIDGE_JOB_ID", cwd=outdir)
    done, out = finished(flux_daemon, job_id)
    assert done["state"] == "Succeeded", (done, out)
    path = outdir / f"one-{job_id}.{job_id:05d}.out"
    assert path.read_text() == f"id={job_id}\n" == out
    assert done["backendId"] != str(job_id)
    show = flux_daemon.cli("alice", "tshow", str(job_id)).stdout
    assert f"BackendJobId={done['backendId']}" in show and f"StdOut={path}" in show, show


def test_exit_code_and_cancel(flux_daemon: Daemon, outdir: Path,
                              flux_bed: dict[str, str]) -> None:
    failing = tbatch(flux_daemon, "bob", "--wrap", "echo about to fail; exit 3", cwd=outdir)
    sleeper = tbatch(flux_daemon, "alice", "--wrap", "echo started; sleep 300", cwd=outdir)
    done, out = finished(flux_daemon, failing, user="bob")
    assert (done["state"], done["exitCode"], done["reason"]) == ("Failed", 3,
                                                                 "NonZeroExitCode"), done
    # (and the script's nested broker logs its exit to stderr, the same file)
    assert [ln for ln in out.splitlines() if "broker.err" not in ln] == ["about to fail"], out
    flux_daemon.wait_state(sleeper, ["Running"], timeout=120)
    assert flux_daemon.cli("bob", "tcancel", str(sleeper)).returncode != 0
    assert flux_daemon.cli("alice", "tcancel", str(sleeper)).returncode == 0
    done = flux_daemon.wait_state(sleeper, TERMINAL, timeout=120)
    assert (done["state"], done["reason"]) == ("Cancelled", "Cancelled"), done
    wait_for(lambda: [j.get("result") for j in flux_jobs_with_uid(flux_bed, done["uid"])]
             == ["CANCELED"], 60, "Flux to report the job CANCELED")


def test_unsatisfiable_request_says_so(flux_daemon: Daemon, outdir: Path) -> None:
    job_id = tbatch(flux_daemon, "alice", "-N", "1", "-c", "64", "--wrap", "true",
                    cwd=outdir)
    done, _ = finished(flux_daemon, job_id)
    assert done["state"] == "Failed" and "unsatisfiable" in done["message"], done


def test_exec_start_failure_says_so(flux_daemon: Daemon, outdir: Path) -> None:
    job_id = trainjob(flux_daemon, outdir, "nosuch", "plain", [str(outdir / "no-such-prog")])
    done, _ = finished(flux_daemon, job_id)
    assert done["state"] == "Failed", done
    assert re.search(r"start failed: .*No such file or directory", done["message"]), done


def test_daemon_killed_mid_run_finds_its_jobs_again(flux_daemon: Daemon, outdir: Path,
                                                    flux_bed: dict[str, str]) -> None:
    """One job running, one pending in Flux behind it (all four nodes, exclusive): after
    a SIGKILL and a restart the daemon finds both, and each ran exactly once."""
    job_id = tbatch(flux_daemon, "alice", "--wrap", "sleep 8; echo done", cwd=outdir)
    running = flux_daemon.wait_state(job_id, ["Running"], timeout=120)
    waiting = tbatch(flux_daemon, "alice", "-N", "4", "--exclusive", "--wrap", "echo all",
                     cwd=outdir)
    pending = flux_daemon.wait_state(waiting, ["Submitted"], timeout=120)
    flux_daemon.kill()
    flux_daemon.start()  # same state directory
    done, out = finished(flux_daemon, job_id)
    assert done["state"] == "Succeeded", done
    assert done["backendId"] == running["backendId"] and out == "done\n"
    later, out = finished(flux_daemon, waiting)
    assert later["state"] == "Succeeded" and out == "all\n", later
    assert later["backendId"] == pending["backendId"] and len(later["nodes"]) == 4
    for uid in (done["uid"], later["uid"]):
        assert len(flux_jobs_with_uid(flux_bed, uid)) == 1, "no duplicate Flux job"


def test_adapter_log_lines_are_structured_json(flux_daemon: Daemon) -> None:
    def started() -> dict[str, Any] | None:
        for line in flux_daemon.log.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "flux_core" in rec:
                return rec
        return None

    rec = wait_for(started, 30, "the flux back end's start line in the daemon log")
    assert rec["flux_core"] == "0.88.0" and rec["backend"] == "flux", rec
    assert rec["logger"].startswith("flux_adapter"), rec


def test_options_placement_time_limit_and_follow(flux_bed: dict[str, str],
                                                 outdir: Path) -> None:
    """``-x``, ``--time``, ``tlog -f``, and the engine's ``placement = "nodelist"``
    (the hosts it chose reach Flux as a hostlist constraint)."""
    d = flux_daemon_for(flux_bed, "flux-nodelist")
    d.backend_settings["placement"] = "nodelist"
    d.start()
    try:
        excluded = tbatch(d, "alice", "-x", "node[1-3]", "--wrap", "hostname", cwd=outdir)
        late = tbatch(d, "alice", "--time=0:05", "--wrap", "sleep 120", cwd=outdir)
        chatty = tbatch(d, "alice", "--wrap", "echo one; sleep 2; echo two", cwd=outdir)
        follow = d.cli("alice", "tlog", "-f", str(chatty))
        assert (follow.returncode, follow.stdout) == (0, "one\ntwo\n"), follow
        done, out = finished(d, excluded)
        assert (done["state"], done["nodes"], out) == ("Succeeded", ["node4"], "node4\n")
        done, _ = finished(d, late)
        assert (done["state"], done["reason"]) == ("Failed", "DeadlineExceeded"), done
        done, _ = finished(d, chatty)
        info = flux_as(flux_bed, flux_bed["FLUX_OWNER"], "job", "info", done["backendId"],
                       "jobspec")
        assert info.returncode == 0, info.stderr
        constraints = json.loads(info.stdout)["attributes"]["system"]["constraints"]
        assert constraints == {"hostlist": done["nodes"]}, constraints
    finally:
        d.stop()
        cleanup(d.workdir)
