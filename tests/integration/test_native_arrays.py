"""Job arrays as one native Slurm array (``native_arrays = true``, docs/slurm.md) end to
end through tbatch on the real Slurm 22.05, through slurmrestd and through the commands:
the same script as real ``sbatch --array``, one Slurm array for every task, each task
still the bridge's job (``tqueue``, ``tshow``, ``tcancel A_I`` and ``A``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings
from tests.integration.conftest_slurm import cluster_for
from tests.integration.test_arrays import SCRIPT, TERMINAL, _squeue_empty, all_ended, submit

pytestmark = pytest.mark.integration


@pytest.fixture(params=["rest", "cli"])
def native_daemon(request: pytest.FixtureRequest, testbed: dict[str, str]) -> Iterator[Daemon]:
    settings = rest_settings(testbed) if request.param == "rest" else {"use_cli": True}
    workdir = fresh_daemon_dir(f"native-{request.param}")
    d = Daemon(workdir, {**settings, "native_arrays": True})
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


@pytest.fixture(params=["24.11", "26.05"])
def newer_native_daemon(request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """The same on the newer Slurm beds, through their slurmrestd."""
    cluster = cluster_for(str(request.param))
    workdir = fresh_daemon_dir(f"native-{request.param}")
    d = Daemon(workdir, {**cluster.settings("rest"), "native_arrays": True})
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


def slurm_ids(tasks: list[dict[str, Any]]) -> set[str]:
    """The Slurm arrays the tasks are in (``S`` of each ``S_I``)."""
    return {str(t["backendId"]).partition("_")[0] for t in tasks}


def test_a_native_array_runs_as_sbatchs_does(native_daemon: Daemon, outdir: Path) -> None:
    """The same script through sbatch and tbatch: the same files (named by %x, %A, %a)
    with the same SLURM_ARRAY_* (Slurm's own, native), in one Slurm array; each task is
    told its own bridge id and the array's."""
    d = native_daemon
    script = outdir / "arr.sh"
    script.write_text(SCRIPT + 'echo "$HPC_BRIDGE_JOB_ID $SLURM_ARRAY_JOB_ID" >&2\n')
    theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "-J",
                             "theirs", "-e", "/dev/null", str(script)], cwd=outdir,
                            capture_output=True, text=True, check=False, timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    sbatch_id = theirs.stdout.strip().split(";")[0]
    ours = submit(d, "-J", "ours", "-e", "%x-%A_%a.err", str(script), cwd=outdir)
    tasks = all_ended(d, ours, 4)
    assert [t["state"] for t in tasks] == ["Succeeded"] * 4, tasks
    assert len(slurm_ids(tasks)) == 1, tasks  # one submission, one Slurm array
    (slurm_id,) = slurm_ids(tasks)
    assert [t["backendId"] for t in tasks] == [f"{slurm_id}_{i}" for i in (1, 3, 5, 7)]
    wait_for(lambda: _squeue_empty(sbatch_id), 240, f"sbatch array {sbatch_id} to end")
    for task in tasks:
        index = task["arrayTaskId"]
        ref = (outdir / f"theirs-{sbatch_id}_{index}.out").read_text()
        assert (outdir / f"ours-{ours}_{index}.out").read_text() == ref == (
            f"{index} 4 1 7 2\n")
        assert (outdir / f"ours-{ours}_{index}.err").read_text() == f"{task['id']} {ours}\n"
    show = d.cli("alice", "tshow", f"{ours}_5").stdout
    assert f"ArrayJobId={ours} ArrayTaskId=5" in show, show


def test_a_native_array_on_the_newer_slurm_releases(newer_native_daemon: Daemon,
                                                     outdir: Path) -> None:
    """24.11 and 26.05: one Slurm array, Slurm's own SLURM_ARRAY_* (as on 22.05, where
    they are compared with sbatch's), each task's own bridge id."""
    d = newer_native_daemon
    script = outdir / "arr.sh"
    script.write_text(SCRIPT + 'echo "$HPC_BRIDGE_JOB_ID $SLURM_ARRAY_JOB_ID" >&2\n')
    ours = submit(d, "-J", "ours", "-e", "%x-%A_%a.err", str(script), cwd=outdir)
    tasks = all_ended(d, ours, 4)
    assert [t["state"] for t in tasks] == ["Succeeded"] * 4, tasks
    assert len(slurm_ids(tasks)) == 1, tasks
    for task in tasks:
        index = task["arrayTaskId"]
        assert (outdir / f"ours-{ours}_{index}.out").read_text() == f"{index} 4 1 7 2\n"
        assert (outdir / f"ours-{ours}_{index}.err").read_text() == f"{task['id']} {ours}\n"


def test_slurm_throttles_a_native_array_and_tcancel_takes_a_task_or_the_array(
        native_daemon: Daemon, outdir: Path) -> None:
    """``%1`` is Slurm's: every task is in Slurm at once, one running, the others
    pending ``JobArrayTaskLimit`` (Slurm's reason); ``tcancel A_3`` cancels one pending
    task (Slurm keeps no record of it: it ends Cancelled all the same), ``tcancel A``
    the rest."""
    d = native_daemon
    gate = outdir / "go"
    # -t 5: a task that starts after the test (its gate gone with outdir) ends anyway.
    array = submit(d, "--array=0-3%1", "-t", "5", "--wrap",
                   f"while [ ! -e {gate} ]; do sleep 0.2; done", cwd=outdir)

    def one_running_three_in_slurm() -> list[dict[str, Any]] | None:
        tasks = [d.job(f"{array}_{i}") for i in range(4)]
        return tasks if (sum(t["state"] == "Running" for t in tasks) == 1
                         and all(t["backendId"] for t in tasks)
                         and [t["reason"] for t in tasks[1:]] == ["JobArrayTaskLimit"] * 3
                         ) else None

    try:
        tasks = wait_for(one_running_three_in_slurm, 120,
                         "one task running and three waiting in Slurm")
        assert len(slurm_ids(tasks)) == 1, tasks
        assert d.cli("bob", "tcancel", f"{array}_3").returncode != 0  # not bob's
        assert d.cli("alice", "tcancel", f"{array}_3").returncode == 0
        assert d.wait_state(f"{array}_3", TERMINAL, timeout=120)["state"] == "Cancelled"
        assert d.job(f"{array}_2")["state"] == "Submitted"  # waiting in Slurm
        assert d.cli("alice", "tcancel", str(array)).returncode == 0
        ended = all_ended(d, array, 4)
        assert [t["state"] for t in ended] == ["Cancelled"] * 4, ended
    finally:
        gate.touch()
        d.cli("alice", "tcancel", str(array))  # none left behind in Slurm


def test_sigkill_at_any_moment_of_a_native_arrays_submission_runs_each_task_once(
        testbed: dict[str, str], outdir: Path) -> None:
    """Eight arrays, the daemon SIGKILLed right after each is admitted (so at a
    different moment of its submission each time: before the claim, between the claim
    and sbatch, in sbatch, before the record) and started again: every task runs once
    (its output, appended to, has one line) and ends Succeeded, each in a native array
    (adopted from the one it reached, or submitted as one again)."""
    workdir = fresh_daemon_dir("native-kill")
    d = Daemon(workdir, {**rest_settings(testbed), "native_arrays": True})
    d.start()
    arrays: list[int] = []
    try:
        for _ in range(8):
            arrays.append(submit(d, "--array=0-5%3", "--open-mode=append", "-o",
                                 "k-%A_%a.out", "--wrap", "echo $HPC_BRIDGE_JOB_ID",
                                 cwd=outdir))
            d.kill()
            d.start()
        for array in arrays:
            tasks = all_ended(d, array, 6)
            assert [t["state"] for t in tasks] == ["Succeeded"] * 6, tasks
            # Adopted from the array it reached, or submitted as one again: native.
            assert all(str(t["backendId"]).endswith(f"_{t['arrayTaskId']}")
                       for t in tasks), tasks
            for task in tasks:
                out = outdir / f"k-{array}_{task['arrayTaskId']}.out"
                assert out.read_text() == f"{task['id']}\n", (task, out.read_text())
    finally:
        d.stop()
        cleanup(workdir)


def test_later_parts_of_a_native_array_keep_the_throttle_and_the_arrays_variables(
        native_daemon: Daemon, outdir: Path) -> None:
    """``-H --array=0-3%2``, the tasks released one by one: each part released goes as
    a Slurm array of its own with the places ``%2`` leaves beside the array's tasks in
    Slurm, so never more than two are in Slurm (the others wait, not submitted) until
    some end; every task is told the whole array's SLURM_ARRAY_* (COUNT 4, MIN 0,
    MAX 3, the bridge's array id), as sbatch tells them."""
    d = native_daemon
    gate = outdir / "go"
    show = ('echo "$SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT $SLURM_ARRAY_TASK_MIN '
            '$SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_JOB_ID"')
    array = submit(d, "-H", "--array=0-3%2", "-o", "w-%A_%a.out", "-t", "5", "--wrap",
                   f"{show}; while [ ! -e {gate} ]; do sleep 0.2; done", cwd=outdir)
    try:
        for index in range(4):
            assert d.cli("alice", "tcontrol", "release", f"{array}_{index}").returncode == 0

        def two_running() -> list[dict[str, Any]] | None:
            tasks = [d.job(f"{array}_{i}") for i in range(4)]
            return tasks if sum(t["state"] == "Running" for t in tasks) == 2 else None

        tasks = wait_for(two_running, 120, "two tasks running")
        assert sum(bool(t["backendId"]) for t in tasks) == 2, tasks  # the others wait
        gate.touch()
        tasks = all_ended(d, array, 4)
        assert [t["state"] for t in tasks] == ["Succeeded"] * 4, tasks
        assert len(slurm_ids(tasks)) >= 2, tasks  # parts released later: arrays of their own
        assert all(str(t["backendId"]).endswith(f"_{t['arrayTaskId']}") for t in tasks), (
            tasks)  # each part native, not one job per task
        for index in range(4):
            assert (outdir / f"w-{array}_{index}.out").read_text() == (
                f"{index} 4 0 3 {array}\n")
    finally:
        gate.touch()
        d.cli("alice", "tcancel", str(array))  # none left behind in Slurm
