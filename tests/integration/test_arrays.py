"""Job arrays end to end (issue 12 item 2): ``--array`` through tbatch on the real Slurm
(compared with real ``sbatch --array`` on the same script), on Flux and on the
Kubernetes bed; the throttle ``%N``; ``tqueue``/``tcancel`` with ``A_I`` and ``A``.

The bridge runs one job per task on every back end (bridge/arrays.py). Ordering is by
conditions, never by sleeps: throttled tasks wait for a file the test writes only once
it has seen the throttle hold.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, wait_for
from tests.integration.k8s_bridge import KWOK_STAY_RUNNING, jobsets
from tests.integration.k8s_users import submit_as, torch_job
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration

TERMINAL = ["Succeeded", "Failed", "Cancelled"]

SCRIPT = """#!/bin/sh
#SBATCH --array=1-7:2%3
#SBATCH -o %x-%A_%a.out -t 5
echo $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT $SLURM_ARRAY_TASK_MIN \
$SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_STEP
"""


def tasks_of(d: Daemon, array_id: int) -> list[dict[str, Any]]:
    items = d.api("GET", "/v1/jobs?states=all").json()["items"]
    return sorted((j for j in items if j.get("arrayJobId") == array_id),
                  key=lambda j: j["arrayTaskId"])


def submit(d: Daemon, *args: str, cwd: Path) -> int:
    res = d.cli("alice", "tbatch", "--parsable", *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def all_ended(d: Daemon, array_id: int, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        tasks = tasks_of(d, array_id)
        return tasks if len(tasks) == count and all(
            t["state"] in TERMINAL for t in tasks) else None
    done: list[dict[str, Any]] = wait_for(check, 240, f"array {array_id} to end")
    return done


def _squeue_empty(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True,
                         check=False).stdout
    return out.strip() == ""


def test_an_array_runs_as_sbatchs_does_on_slurm(daemon: Daemon, outdir: Path) -> None:
    """The same script through sbatch and tbatch: one output file per task named by %A
    and %a, and the same SLURM_ARRAY_* in each (with each one's own ids)."""
    script = outdir / "arr.sh"
    script.write_text(SCRIPT)
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-J",
                             "theirs", str(script)], cwd=outdir, capture_output=True,
                            text=True, check=False, timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    sbatch_id = theirs.stdout.strip().split(";")[0]
    ours = submit(daemon, "-J", "ours", str(script), cwd=outdir)

    def shown() -> list[str]:
        out = daemon.cli("alice", "tqueue", "-h", "-j", str(ours), "-t", "all", "-o", "%i")
        return sorted(out.stdout.split())

    # Tasks not yet in Slurm are folded as squeue folds them (A_[1,3,5%3]); once the
    # throttle's three went, each task is a line of its own (the fourth waits alone).
    wait_for(lambda: shown() == [f"{ours}_{i}" for i in (1, 3, 5, 7)], 60,
             f"tqueue to show each task of {ours}")
    tasks = all_ended(daemon, ours, 4)
    assert [t["state"] for t in tasks] == ["Succeeded"] * 4, tasks
    assert [t["id"] for t in tasks] == list(range(ours, ours + 4))  # task ids follow A
    wait_for(lambda: _squeue_empty(sbatch_id), 240, f"sbatch array {sbatch_id} to end")
    for index in (1, 3, 5, 7):
        ref = (outdir / f"theirs-{sbatch_id}_{index}.out").read_text()
        got = (outdir / f"ours-{ours}_{index}.out").read_text()
        assert got == ref == f"{index} 4 1 7 2\n", (index, got, ref)
    show = daemon.cli("alice", "tshow", f"{ours}_5").stdout
    assert f"ArrayJobId={ours} ArrayTaskId=5 ArrayTasks=1,3,5,7%3" in show, show
    every = daemon.cli("alice", "tshow", str(ours)).stdout  # scontrol show job A: each
    assert [f"ArrayTaskId={i}" in rec for i, rec in zip(
        (1, 3, 5, 7), every.split("\n\n"), strict=True)] == [True] * 4, every


def test_an_arrays_default_output_is_named_as_sbatch_names_it(
        daemon: Daemon, outdir: Path) -> None:
    """No ``-o``: sbatch writes each task to ``slurm-<array id>_<index>.out``; tbatch
    too, with its own array id (it wrote ``slurm-<task id>.out``)."""
    script = outdir / "plain-arr.sh"
    script.write_text("#!/bin/sh\n#SBATCH --array=1-2 -t 5\necho $SLURM_ARRAY_TASK_ID\n")
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable",
                             str(script)], cwd=outdir, capture_output=True, text=True,
                            check=False, timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    sbatch_id = theirs.stdout.strip().split(";")[0]
    ours = submit(daemon, str(script), cwd=outdir)
    assert [t["state"] for t in all_ended(daemon, ours, 2)] == ["Succeeded"] * 2
    wait_for(lambda: _squeue_empty(sbatch_id), 240, f"sbatch array {sbatch_id} to end")
    for index in (1, 2):
        assert (outdir / f"slurm-{ours}_{index}.out").read_text() == (
            outdir / f"slurm-{sbatch_id}_{index}.out").read_text() == f"{index}\n"


def test_the_throttle_holds_and_tcancel_takes_a_task_or_the_array(
        bed_daemon: Daemon, outdir: Path) -> None:
    """On Slurm and on Flux alike: ``%2`` holds the rest (squeue's reason and views),
    ``tcancel A_[I]`` frees one place for the next task only, ``tcancel A`` ends them
    all (one never reached its back end), and bob may cancel none."""
    daemon = bed_daemon
    gate = outdir / "go"
    array = submit(daemon, "--array=0-3%2", "--wrap",
                   f"while [ ! -e {gate} ]; do sleep 0.2; done", cwd=outdir)

    def two_running() -> list[dict[str, Any]] | None:
        tasks = tasks_of(daemon, array)
        return tasks if sum(t["state"] == "Running" for t in tasks) == 2 else None

    tasks = wait_for(two_running, 120, "two tasks running")
    assert [t["state"] for t in tasks[2:]] == ["Pending", "Pending"], tasks
    assert all(t["reason"] == "JobArrayTaskLimit" and t["backendId"] is None
               for t in tasks[2:]), tasks
    queue = daemon.cli("alice", "tqueue", "-h", "-r", "-j", str(array), "-o", "%i %t %R")
    rows = sorted(queue.stdout.splitlines())
    assert rows[2:] == [f"{array}_2 PD (JobArrayTaskLimit)",
                        f"{array}_3 PD (JobArrayTaskLimit)"], rows
    folded = daemon.cli("alice", "tqueue", "-h", "-j", str(array), "-o", "%i %t %R")
    assert folded.stdout.splitlines()[-1] == f"{array}_[2-3%2] PD (JobArrayTaskLimit)", (
        folded)  # squeue's view
    assert daemon.cli("bob", "tcancel", str(array)).returncode != 0  # not bob's
    assert daemon.cli("alice", "tcancel", f"{array}_[1]").returncode == 0  # scancel's form
    assert daemon.wait_state(f"{array}_1", TERMINAL)["state"] == "Cancelled"
    # Its place goes to the next task, and only that one.
    daemon.wait_state(f"{array}_2", ["Running"], timeout=120)
    assert daemon.job(f"{array}_3")["reason"] == "JobArrayTaskLimit"
    assert daemon.cli("alice", "tcancel", str(array)).returncode == 0
    ended = all_ended(daemon, array, 4)
    assert [t["state"] for t in ended] == ["Cancelled"] * 4, ended
    assert ended[3]["backendId"] is None  # never reached its back end


def test_an_array_on_flux(flux_daemon: Daemon, outdir: Path) -> None:
    array = submit(flux_daemon, "--array=0-1", "-o", f"{outdir}/f-%A_%a.out", "--wrap",
                   "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $HPC_BRIDGE_JOB_ID",
                   cwd=outdir)
    tasks = all_ended(flux_daemon, array, 2)
    assert [t["state"] for t in tasks] == ["Succeeded"] * 2, tasks
    for task in tasks:
        index = task["arrayTaskId"]
        assert (outdir / f"f-{array}_{index}.out").read_text() == (
            f"{array} {index} {task['id']}\n")


def test_bad_arrays_are_refused_naming_the_option(daemon: Daemon, outdir: Path) -> None:
    for spec, words in (("0-2000", "maximum array size 1001"), ("5-1", "backwards"),
                        ("1-4%0", "throttle"), ("x", "not an index")):
        res = daemon.cli("alice", "tbatch", f"--array={spec}", "--wrap", "true", cwd=outdir)
        assert res.returncode == 1 and "--array" in res.stderr and words in res.stderr, res
    # Every task keeps its own copy of the script: a thousand of a 64 KiB one is too much.
    big = outdir / "big.sh"
    big.write_text("#!/bin/sh\n#SBATCH --array=0-1000\n" + "# padding\n" * 6600 + "true\n")
    res = daemon.cli("alice", "tbatch", str(big), cwd=outdir)
    assert res.returncode == 1 and "1001 tasks of a" in res.stderr and "MiB" in res.stderr, res
    assert daemon.api("GET", "/v1/jobs?states=all").json()["items"] == []


def test_an_array_on_kubernetes(k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon
                                ) -> None:
    """One JobSet per task, each pod told its task (SLURM_ARRAY_*; the bed's nodes run
    no containers, so what a pod is told is read from its JobSet); the throttle holds
    the third task until one of the first two ends."""
    d = k8s_alice
    array = submit(d, "--backend", "kubernetes", "--array=2-4%2", "--wrap",
                   "echo task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID",
                   cwd=d.workdir)
    tasks = all_ended(d, array, 3)
    assert [t["state"] for t in tasks] == ["Succeeded"] * 3, tasks
    names = {t["backendId"].partition("/")[2]: t["arrayTaskId"] for t in tasks}
    assert len(names) == 3  # a JobSet each
    told = {}
    for js in jobsets(k8s, k8s_namespace):
        if js["metadata"]["name"] in names:
            pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
            told[names[js["metadata"]["name"]]] = (env["SLURM_ARRAY_JOB_ID"],
                                                   env["SLURM_ARRAY_TASK_ID"])
    assert told == {i: (str(array), str(i)) for i in (2, 3, 4)}, told
    moves = d.job(f"{array}_4")["transitions"]
    assert moves[0]["reason"] == "JobArrayTaskLimit", moves
    submitted = next(m["at"] for m in moves if m["to"] == "Submitted")
    assert submitted >= min(t["endTime"] for t in tasks[:2]), (moves, tasks)


def test_dependencies_on_an_array_its_tasks_and_aftercorr(daemon: Daemon, outdir: Path
                                                          ) -> None:
    """``afterok:A`` waits for every task, ``afterok:A_1`` for task 1 only, and an array
    ``aftercorr:A`` runs each task after its counterpart (Slurm's meanings)."""
    gate = f"{outdir}/g$SLURM_ARRAY_TASK_ID"
    array = submit(daemon, "--array=0-1", "--wrap",
                   f"while [ ! -e {gate} ]; do sleep 0.2; done", cwd=outdir)
    one = submit(daemon, f"--dependency=afterok:{array}_1", "--wrap", "true", cwd=outdir)
    whole = submit(daemon, f"--dependency=afterok:{array}", "--wrap", "true", cwd=outdir)
    corr = submit(daemon, "--array=0-1", f"--dependency=aftercorr:{array}", "--wrap", "true",
                  cwd=outdir)
    for ref in (one, whole, f"{corr}_0", f"{corr}_1"):
        wait_for(lambda ref=ref: daemon.job(ref)["reason"] == "Dependency", 120,
                 f"{ref} held")
    (outdir / "g1").touch()
    assert daemon.wait_state(one, TERMINAL, timeout=180)["state"] == "Succeeded"
    assert daemon.wait_state(f"{corr}_1", TERMINAL, timeout=180)["state"] == "Succeeded"
    assert daemon.job(whole)["reason"] == "Dependency"
    assert daemon.job(f"{corr}_0")["reason"] == "Dependency"
    (outdir / "g0").touch()
    assert daemon.wait_state(whole, TERMINAL, timeout=180)["state"] == "Succeeded"
    assert daemon.wait_state(f"{corr}_0", TERMINAL, timeout=180)["state"] == "Succeeded"
    res = daemon.cli("alice", "tbatch", f"--dependency=afterok:{array}_7", "--wrap", "true",
                     cwd=outdir)
    assert res.returncode == 1 and f"job {array}_7 does not exist" in res.stderr, res


@pytest.mark.parametrize("fixture", ["cli_daemon", "daemon_2411", "daemon_2605"])
def test_an_array_on_each_slurm_release_and_path(
        fixture: str, request: pytest.FixtureRequest, outdir: Path) -> None:
    """The same array on Slurm's CLI path and on the 24.11 and 26.05 clusters (REST)."""
    d: Daemon = request.getfixturevalue(fixture)
    array = submit(d, "--array=0-2%2", "-J", "rel", "-o", "%x-%A_%a.out", "--wrap",
                   "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT",
                   cwd=outdir)
    tasks = all_ended(d, array, 3)
    assert [t["state"] for t in tasks] == ["Succeeded"] * 3, tasks
    for task in tasks:
        log = d.cli("alice", "tlog", f"{array}_{task['arrayTaskId']}", cwd=outdir)
        assert log.stdout == f"{array} {task['arrayTaskId']} 3\n", log
        assert task["stdout"].endswith(f"rel-{array}_{task['arrayTaskId']}.out"), task
    moves = d.job(f"{array}_2")["transitions"]
    assert moves[0]["reason"] == "JobArrayTaskLimit", moves


def test_the_throttle_and_tcancel_on_kubernetes(k8s: K8sBed, k8s_namespace: str,
                                                k8s_alice: Daemon) -> None:
    """As on Slurm and Flux: ``%2`` holds the rest (tqueue ``A_I`` and squeue's folded
    view), ``tcancel A_[1]`` ends one task and its JobSet and frees one place,
    ``tcancel A`` ends them all, and bob may cancel none. The pods stay running (the
    bed's kwok completes no pod with that label) until cancelled."""
    d = k8s_alice
    doc = torch_job("stays", k8s_namespace)
    doc["spec"]["runtimePatches"] = [{"manager": "alice", "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
            "template": {"metadata": {"labels": {KWOK_STAY_RUNNING: "true"}}}}}}]}}}}]
    doc["metadata"]["annotations"]["hpc-bridge.io/scheduling"] = '{"array": "0-3%2"}'
    answer = submit_as(d, "alice", doc)
    assert answer["status"] == 201, answer
    array = int(answer["id"])

    def two_running() -> list[dict[str, Any]] | None:
        tasks = tasks_of(d, array)
        return tasks if sum(t["state"] == "Running" for t in tasks) == 2 else None

    tasks = wait_for(two_running, 120, "two tasks running")
    assert [(t["state"], t["reason"]) for t in tasks[2:]] == [
        ("Pending", "JobArrayTaskLimit")] * 2, tasks
    rows = sorted(d.cli("alice", "tqueue", "-h", "-r", "-j", str(array), "-o",
                        "%i %t").stdout.splitlines())
    assert rows == [f"{array}_0 R", f"{array}_1 R", f"{array}_2 PD", f"{array}_3 PD"], rows
    folded = d.cli("alice", "tqueue", "-h", "-j", str(array), "-o", "%i %t").stdout
    assert folded.splitlines()[-1] == f"{array}_[2-3%2] PD", folded
    assert d.cli("bob", "tcancel", str(array)).returncode != 0  # not bob's
    gone = tasks[1]["backendId"].partition("/")[2]
    assert d.cli("alice", "tcancel", f"{array}_[1]").returncode == 0
    assert d.wait_state(f"{array}_1", TERMINAL)["state"] == "Cancelled"
    k8s.wait_for(lambda: gone not in {js["metadata"]["name"] for js in jobsets(
        k8s, k8s_namespace)}, 60, "the cancelled task's JobSet to go")
    d.wait_state(f"{array}_2", ["Running"], timeout=120)
    assert d.job(f"{array}_3")["reason"] == "JobArrayTaskLimit"
    assert d.cli("alice", "tcancel", str(array)).returncode == 0
    ended = all_ended(d, array, 4)
    assert [t["state"] for t in ended] == ["Cancelled"] * 4, ended
    assert ended[3]["backendId"] is None  # never reached Kubernetes
