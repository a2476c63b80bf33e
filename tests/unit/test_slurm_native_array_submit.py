"""One submission for a native Slurm array (slurm_adapter/native_array.py): its job
description and the prologue that tells each task who it is (run under bash here;
tests/integration/test_slurm_native_arrays.py runs arrays on every release of the beds)."""

from __future__ import annotations

import subprocess

import pytest

from bridge.arrays import NativeTask, array_key
from bridge.jobid import names_own_id
from bridge.scheduling import SchedulingOptions
from slurm_adapter.dialects import V0_0_38, V0_0_44
from slurm_adapter.native_array import array_prologue, native_spec
from slurm_adapter.script import job_spec, render_script, rest_job, sbatch_args
from tests.unit.builders import HOSTILE, UID, trainjob
from tests.unit.builders import submit_request as request

KEY = array_key(UID, 3)


@pytest.mark.parametrize(("pattern", "own"), [
    ("out-%j.txt", True), ("%J", True), ("x-%8j", True), ("%A_%a.out", False),
    ("100%%j", False), ("%%%j", True), ("plain", False), ("%", False), ("%x-%u", False),
])
def test_names_own_id(pattern: str, own: bool) -> None:
    assert names_own_id(pattern) is own


def spec_of(options: SchedulingOptions) -> tuple[list[str], dict[str, object]]:
    req = request(trainjob(command=["true"]), options, job_id=40)
    spec = native_spec(job_spec(req, default_chdir="/home/alice"), req, KEY, 40, "3,5,9%2")
    return sbatch_args(spec), rest_job(spec, {}, V0_0_44)


def test_the_array_is_one_job_description_with_the_arrays_key_and_indexes() -> None:
    args, body = spec_of(SchedulingOptions(comment="mine"))
    assert "--array=3,5,9%2" in args and body["array"] == "3,5,9%2"
    assert f"--comment=hpc-bridge:{KEY} mine" in args
    # %A is the bridge's array id, %a left to Slurm: sbatch's name for a task's file.
    assert "--output=slurm-40_%a.out" in args and body["standard_output"] == "slurm-40_%a.out"
    args, body = spec_of(SchedulingOptions(output="o-%x-%A.%a", error="e-%A"))
    assert "--output=o-%x-40.%a" in args and "--error=e-40" in args


def test_an_output_name_with_each_tasks_own_id_is_refused_before_submission() -> None:
    for options in (SchedulingOptions(output="o-%j"), SchedulingOptions(error="e-%J")):
        with pytest.raises(ValueError, match="own job id"):
            spec_of(options)


def run_prologue(text: str, task: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", text + 'echo "$HPC_BRIDGE_JOB_ID|$X|'
                           '$SLURM_ARRAY_JOB_ID"'], env={"SLURM_ARRAY_TASK_ID": task,
                                                          "SLURM_ARRAY_JOB_ID": "9999"},
                          capture_output=True, text=True, timeout=30, check=False)


def test_each_task_is_told_its_own_variables_and_the_bridges_array_id() -> None:
    text = array_prologue(40, [NativeTask(3, {"HPC_BRIDGE_JOB_ID": "40", "X": HOSTILE}),
                               NativeTask(5, {"HPC_BRIDGE_JOB_ID": "41", "X": "it's"})])
    assert run_prologue(text, "3").stdout == f"40|{HOSTILE}|40\n"
    assert run_prologue(text, "5").stdout == "41|it's|40\n"
    # A task the prologue does not know runs nothing of the job.
    stray = run_prologue(text, "7")
    assert stray.returncode == 1 and stray.stdout == ""
    assert "task 7 is not one of array 40's" in stray.stderr


def test_a_variable_name_that_is_no_shell_name_is_refused() -> None:
    with pytest.raises(ValueError, match="not a variable name"):
        array_prologue(40, [NativeTask(3, {"A;rm -rf ~": "x"})])


def test_the_prologue_runs_before_the_jobs_own_lines() -> None:
    """A command job and a plain batch script (run as a file of its own, any
    interpreter) both start with it."""
    prologue = array_prologue(40, [NativeTask(3, {"HPC_BRIDGE_JOB_ID": "40"})])
    script = render_script(request(trainjob(command=["true"]), job_id=40), prologue=prologue)
    assert script.index("case \"${SLURM_ARRAY_TASK_ID:-}\"") < script.index("exec ")
    plain = job_spec(request(trainjob(command=["true"])), default_chdir="/")
    assert "array" not in rest_job(plain, {}, V0_0_38)
    assert not any(a.startswith("--array") for a in sbatch_args(plain))
