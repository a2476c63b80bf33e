"""slurm_adapter.script: batch script, sbatch flags and REST body (golden files).

Golden files live in tests/unit/golden/slurm/. After an intended change, rewrite
them with ``UPDATE_GOLDEN=1 pytest tests/unit/test_slurm_script.py`` and review
the diff.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.backend import SubmitRequest
from bridge.model import ANN_BATCH_SCRIPT, TrainJob, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from slurm_adapter.dialects import V0_0_38, V0_0_41, UnsupportedOption
from slurm_adapter.script import (
    DEFAULT_PATH,
    JobSpec,
    container_prefix,
    expand_output_pattern,
    job_environment,
    job_spec,
    launch_command,
    neutralise_directives,
    render_script,
    rest_job,
    sbatch_args,
    sbatch_output_env,
)
from slurm_adapter.settings import SlurmSettings
from tests.unit import golden_files
from tests.unit.builders import HOSTILE, UID, trainjob
from tests.unit.builders import submit_request as request
from tests.unit.golden_files import check_golden, json_text

GOLDEN = golden_files.GOLDEN / "slurm"


def golden(name: str, text: str) -> None:
    check_golden(GOLDEN / name, text)


def golden_json(name: str, data: Any) -> None:
    golden(name, json_text(data))


def hostile_request() -> SubmitRequest:
    job = trainjob("plain", command=["sh", "-c", HOSTILE], args=["a\nb", "ünïcødé", "'", ""],
                   env={"SECRET": "s3cret value", "MULTI": "line1\nline2"})
    options = SchedulingOptions(job_name=HOSTILE, output="/tmp/out dir/$(id)-%j.out",
                                chdir="/tmp/work dir/`id`")
    return request(job, options)


def torch_request() -> SubmitRequest:
    job = trainjob("torch-distributed", nodes=2, procs=4,
                   command=["torchrun", "--nnodes=2", "--nproc-per-node=4", "train.py"],
                   args=["--epochs", "3", "--lr=0.1"], env={"OMP_NUM_THREADS": "1"})
    return request(job, SchedulingOptions(partition="gpu", time_limit_minutes=90,
                                          gpus_per_node=4, output="logs/%x-%j.out"))


ALL_OPTIONS = SchedulingOptions(
    job_name="all-options", partition="debug", account="proj", qos="high",
    time_limit_minutes=30, ntasks=8, ntasks_per_node=4, cpus_per_task=2, gpus_per_node=1,
    mem_per_node_mb=4096, output="out-%j.log", error="err-%j.log", chdir="/scratch/alice",
    exclusive=True, switches=1, switches_wait_minutes=5, nodelist="node[1-2]",
    exclude="node4", constraint="fast&big",
)


# --- the batch script ----------------------------------------------------------------------


def test_plain_script_with_hostile_strings() -> None:
    req = hostile_request()
    script = render_script(req)
    golden("hostile_plain.sh", script)
    assert "s3cret" not in script and "line1" not in script  # env never in the script


def test_hostile_script_runs_the_exact_argv(tmp_path: Path) -> None:
    """Bash sees exactly the user's argv: nothing is expanded or executed."""
    marker = tmp_path / "pwned"
    words = [f"$(touch {marker})", f"`touch {marker}`", "a\nb", "it's", '"', "\\", "é✓", "",
             "*", "~", "$HOME", ";", "|", "&&", "#x", "-n"]
    job = trainjob("plain", command=["printf", "%s\\0"], args=words)
    script = render_script(request(job))
    done = subprocess.run(["bash", "-c", script], capture_output=True, cwd=tmp_path, check=True)
    assert done.stdout.decode().split("\0")[:-1] == words
    assert not marker.exists()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(exclude_characters="\x00",
                                      exclude_categories=["Cs"]), max_size=20),
                min_size=1, max_size=5))
def test_any_argv_survives_the_script(words: list[str]) -> None:
    job = trainjob("plain", command=["printf", "%s\\0"], args=words)
    script = render_script(request(job))
    done = subprocess.run(["bash", "-c", script], capture_output=True, check=True)
    assert done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == words


def test_comment_line_stays_one_line_even_for_a_bad_name() -> None:
    job = trainjob("plain", command=["true"])
    job.metadata.name = "evil\nrm -rf /"
    script = render_script(request(job))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert lines[1].startswith("# hpc-bridge TrainJob ") and "\\x0a" in lines[1]
    assert lines[2] == "exec true"
    assert len(lines) == 3


def test_torch_script_starts_mpi_launch_once_per_node() -> None:
    req = torch_request()
    golden("torch.sh", render_script(req, "/opt/hpc-bridge/bin/mpi-launch"))
    argv = launch_command(req.plan, "/opt/hpc-bridge/bin/mpi-launch")
    assert argv[:4] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1"]
    cut = argv.index("--")
    assert argv[cut - 5:cut] == ["/opt/hpc-bridge/bin/mpi-launch", "--runtime", "torch",
                                 "--nproc-per-node", "4"]
    assert argv[cut + 1:] == [*req.plan.command, *req.plan.args]


def test_torch_auto_procs_starts_one_launcher_per_node() -> None:
    job = trainjob("torch-distributed", nodes=3, command=["torchrun", "t.py"])
    argv = launch_command(RuntimeCatalog().resolve(job))
    assert argv[:4] == ["srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1"]
    assert "--nproc-per-node" not in argv[:argv.index("--")]


def test_mpi_script_runs_the_launcher_once_with_a_private_hostfile_dir() -> None:
    job = trainjob("mpi-distributed", nodes=2, command=["python3", "allreduce.py", "$(x)"])
    job.spec.trainer.num_proc_per_node = 2  # type: ignore[union-attr]
    req = request(job)
    script = render_script(req, "/opt/hpc-bridge/bin/mpi-launch")
    golden("mpi.sh", script)
    assert "exec" not in script  # the EXIT trap must run to remove the hostfile
    assert ("/opt/hpc-bridge/bin/mpi-launch --runtime mpi --mpi openmpi --nproc-per-node 2"
            ' --hostfile-dir "$hostfile_dir" -- python3 allreduce.py \'$(x)\'') in script


TBATCH_SCRIPT = """#!/bin/bash
#SBATCH --runtime=torch-distributed
#SBATCH -N 2
# a comment
   #SBATCH --indented-is-a-comment
##SBATCH --already-disabled

#SBATCH --time=10
srun hostname
#SBATCH --after-the-first-command-is-not-a-directive
"""


def test_tbatch_script_is_kept_with_directives_neutralised() -> None:
    job = trainjob("plain", annotations={ANN_BATCH_SCRIPT: TBATCH_SCRIPT})
    script = render_script(request(job))
    golden("tbatch.sh", script)
    assert "\n#SBATCH" not in script.split("srun hostname")[0]
    assert script.endswith("\n#SBATCH --after-the-first-command-is-not-a-directive\n")


@pytest.mark.parametrize("separator", ["\f", "\v", "\r", "\x1c", "\x1d", "\x1e", "\x85",
                                       "\u2028", "\u2029"])
def test_no_line_separator_but_newline_ends_the_directive_block(separator: str) -> None:
    """sbatch splits a script at "\\n" only: "#x<FF>echo hi" is one comment line to it,
    so the #SBATCH lines after it are live and must be neutralised too."""
    script = f"#!/bin/bash\n#x{separator}echo hi\n#SBATCH --array=0-999\nsrun true\n"
    assert neutralise_directives(script) == script.replace("#SBATCH", "##SBATCH")


def test_neutralise_keeps_crlf_and_untouched_scripts() -> None:
    assert neutralise_directives("#!/bin/sh\r\n#SBATCH -N1\r\necho\r\n") == \
        "#!/bin/sh\r\n##SBATCH -N1\r\necho\r\n"
    plain = "#!/bin/sh\necho hi\n"
    assert neutralise_directives(plain) == plain


# --- flags and REST body ---------------------------------------------------------------------


def test_hostile_flags_and_rest_body() -> None:
    req = hostile_request()
    spec = job_spec(req, default_chdir="/home/alice")
    golden("hostile_plain.sbatch", "\n".join(sbatch_args(spec)) + "\n")
    golden_json("hostile_plain.v0.0.38.json",
                rest_job(spec, job_environment(req), V0_0_38))


def test_torch_flags_and_rest_bodies() -> None:
    req = torch_request()
    spec = job_spec(req, default_chdir="/home/alice", default_partition="debug")
    assert spec.partition == "gpu"  # the job's own choice wins over the default
    golden("torch.sbatch", "\n".join(sbatch_args(spec)) + "\n")
    env = job_environment(req)
    golden_json("torch.v0.0.38.json", V0_0_38.submit_body(render_script(req),
                                                          rest_job(spec, env, V0_0_38)))
    golden_json("torch.v0.0.41.json", V0_0_41.submit_body(render_script(req),
                                                          rest_job(spec, env, V0_0_41)))


def test_every_option_becomes_a_flag() -> None:
    job = trainjob("mpi-distributed", nodes=2, command=["./app"])
    spec = job_spec(request(job, ALL_OPTIONS), default_chdir="/home/alice")
    golden("all_options.sbatch", "\n".join(sbatch_args(spec)) + "\n")
    golden_json("all_options.v0.0.41.json", rest_job(spec, {"PATH": "/bin"}, V0_0_41))


def test_v0_0_38_cannot_carry_switches_but_everything_else() -> None:
    job = trainjob("mpi-distributed", nodes=2, command=["./app"])
    spec = job_spec(request(job, ALL_OPTIONS), default_chdir="/home/alice")
    with pytest.raises(UnsupportedOption, match="switches"):
        rest_job(spec, {}, V0_0_38)
    no_switch = job_spec(request(job, ALL_OPTIONS.model_copy(update={"switches": None})),
                         default_chdir="/home/alice")
    golden_json("all_options.v0.0.38.json", rest_job(no_switch, {"PATH": "/bin"}, V0_0_38))


def test_defaults() -> None:
    job = trainjob("plain", command=["true"])
    spec = job_spec(request(job), default_chdir="/home/alice", default_partition="debug")
    assert sbatch_args(spec) == [
        "--job-name=train",
        f"--comment=hpc-bridge:{UID}",
        "--nodes=1",
        "--chdir=/home/alice",
        "--output=slurm-42.out",  # the bridge's id (bridge/jobid.py), not Slurm's
        "--partition=debug",
    ]


def test_a_task_of_an_array_writes_slurm_A_a_out_by_default() -> None:
    """As sbatch names an array task's output: ``slurm-<array id>_<index>.out``, with
    the bridge's ids (it was the task's own id, ``slurm-<task id>.out``)."""
    from dataclasses import replace

    from bridge.arrays import ArrayTask, parse
    task = replace(request(trainjob("plain", command=["true"])),
                   array=ArrayTask(40, 3, parse("1-3")))
    assert job_spec(task, default_chdir="/").output == "slurm-40_3.out"


def test_plain_jobs_get_no_tasks_per_node_from_the_runtime_default() -> None:
    job = trainjob("plain", command=["true"])
    assert job_spec(request(job), default_chdir="/").ntasks_per_node is None
    mpi = trainjob("mpi-distributed", nodes=2, procs=3, command=["./app"])
    assert job_spec(request(mpi), default_chdir="/").ntasks_per_node == 3
    assert job_spec(request(mpi, SchedulingOptions(ntasks=5)),
                    default_chdir="/").ntasks_per_node is None


def test_environment_is_the_plan_plus_a_default_path_and_the_bridge_id() -> None:
    job = trainjob("plain", command=["true"], env={"A": "1"})
    ids = {"HPC_BRIDGE_JOB_ID": "42", "HPC_BRIDGE_JOB_UID": UID}
    assert job_environment(request(job)) == {
        "A": "1", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", **ids}
    own = trainjob("plain", command=["true"], env={"PATH": "/opt/bin"})
    assert job_environment(request(own)) == {"PATH": "/opt/bin", **ids}
    forged = trainjob("plain", command=["true"], env={"HPC_BRIDGE_JOB_ID": "1"})
    assert job_environment(request(forged))["HPC_BRIDGE_JOB_ID"] == "42"


# --- output patterns -------------------------------------------------------------------------

# Expected names are those slurmd created on the 22.05 test bed.
@pytest.mark.parametrize(
    ("pattern", "kwargs", "expected"),
    [
        ("fx-%x-%j.out", {}, "/tmp/sx/fx/fx-fx-ok-63.out"),
        ("/tmp/sx/fx/run-%4j-%u.out", {}, "/tmp/sx/fx/run-0063-alice.out"),
        ("slurm-%A_%a.out", {"array_job_id": 71, "array_task_id": 2},
         "/tmp/sx/fx/slurm-71_2.out"),
        ("slurm-%j.out", {}, "/tmp/sx/fx/slurm-63.out"),
        ("100%%-%j", {}, "/tmp/sx/fx/100%-63"),
        ("%N-%n-%t-%s.log", {"node": "node3"}, "/tmp/sx/fx/node3-0-0-batch.log"),
        ("%N.log", {}, "/tmp/sx/fx/%N.log"),
        ("%q-%j", {}, "/tmp/sx/fx/%q-63"),
        ("a\\%j", {}, "/tmp/sx/fx/a%j"),
        ("%12j", {}, "/tmp/sx/fx/0000000063"),
        ("%a", {}, "/tmp/sx/fx/4294967294"),
        ("%3b", {"array_task_id": 17}, "/tmp/sx/fx/007"),
        ("%A", {}, "/tmp/sx/fx/63"),
        ("end%", {}, "/tmp/sx/fx/end"),
    ],
)
def test_expand_output_pattern(pattern: str, kwargs: dict[str, Any], expected: str) -> None:
    job_id = 63 if "array_job_id" not in kwargs else 71
    assert expand_output_pattern(pattern, job_id, "fx-ok", "alice", "/tmp/sx/fx",
                                 **kwargs) == expected


HOSTILE_SCRIPT = """#!/bin/bash
#SBATCH -N 2
echo "$(touch /tmp/should-not-run-at-render) `id` $HOME"
EOF
HPC_BRIDGE_SCRIPT_x
mpirun python3 allreduce.py "$@"
"""


def batch_request(runtime: str, args: list[str]) -> SubmitRequest:
    job = trainjob(runtime, nodes=2, procs=2, args=args,
                   annotations={ANN_BATCH_SCRIPT: HOSTILE_SCRIPT})
    return request(job)


@pytest.mark.parametrize("runtime", ["mpi-distributed", "torch-distributed"])
def test_batch_script_with_a_distributed_runtime_goes_through_mpi_launch(
        runtime: str, tmp_path: Path) -> None:
    req = batch_request(runtime, ["one", "two words", "$(x)"])
    golden(f"batch-{runtime}.sh", render_script(req, "/opt/hpc-bridge/bin/mpi-launch"))
    assert job_spec(req, default_chdir="/tmp").script_args == ()  # they are in the wrapper
    # Run the wrapper with stand-ins for srun and mpi-launch that record what they get:
    # the user's script must arrive byte for byte, its arguments as separate words.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\n'
                                 'exec "$@"\n')
    (bindir / "mpi-launch").write_text(
        '#!/bin/bash\nprintf "%s\\n" "$@" > args.txt\n'
        'while [[ $1 != -- ]]; do shift; done; shift\ncp "$1" seen.sh\n')
    for tool in bindir.iterdir():
        tool.chmod(0o755)
    wrapper = render_script(req, str(bindir / "mpi-launch"))
    subprocess.run(["bash", "-c", wrapper], cwd=tmp_path, check=True,
                   env={"PATH": f"{bindir}:/usr/bin:/bin", "SLURM_JOB_ID": "77"})
    assert (tmp_path / "seen.sh").read_text() == HOSTILE_SCRIPT
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert args[-3:] == ["one", "two words", "$(x)"]
    assert args[args.index("--launcher") + 1] == "none"
    assert not Path("/tmp/should-not-run-at-render").exists()
    assert not list(tmp_path.glob(".hpc-bridge-77.*"))  # removed on exit


def test_plain_batch_script_keeps_its_arguments_for_sbatch() -> None:
    req = batch_request("plain", ["a b"])
    assert job_spec(req, default_chdir="/tmp").script_args == ("a b",)
    assert render_script(req).startswith("#!/bin/bash\n##SBATCH -N 2\n")


def test_a_pinned_placement_becomes_the_node_list() -> None:
    from dataclasses import replace

    from bridge.placement import Placement

    job = trainjob("torch-distributed", nodes=2, command=["train"])
    pinned = replace(request(job), placement=Placement("tree_best_fit", 2,
                                                       ("node3", "node4"), (1, 1)))
    spec = job_spec(pinned, default_chdir="/tmp")
    assert spec.nodelist == "node[3-4]"
    assert "--nodelist=node[3-4]" in sbatch_args(spec)
    assert rest_job(spec, {"PATH": "/bin"}, V0_0_38)["nodelist"] == "node[3-4]"
    assert rest_job(spec, {"PATH": "/bin"}, V0_0_41)["required_nodes"] == ["node3", "node4"]
    # The user's own --nodelist wins (the engine never pins then anyway).
    own = replace(pinned, options=SchedulingOptions(nodelist="node1"))
    assert job_spec(own, default_chdir="/tmp").nodelist == "node1"
    assert job_spec(request(job), default_chdir="/tmp").nodelist is None


# --- resourcesPerNode (issue 10: a TrainJob CR routed to Slurm kept its GPUs) -------------


def _with_resources(job: TrainJob, resources: dict[str, Any]) -> TrainJob:
    doc = job.to_dict()
    doc["spec"]["trainer"]["resourcesPerNode"] = resources
    return load_trainjob(doc)


def test_resources_per_node_reach_sbatch_and_rest() -> None:
    job = _with_resources(
        trainjob("torch-distributed", nodes=2, procs=4, command=["python", "t.py"]),
        {"requests": {"cpu": "16", "memory": "8Gi", "nvidia.com/gpu": 4}})
    spec = job_spec(request(job), default_chdir="/home/alice")
    args = sbatch_args(spec)
    assert "--gpus-per-node=4" in args
    assert "--mem=8192" in args
    assert "--cpus-per-task=4" in args  # 16 CPUs over 4 ranks per node
    body = rest_job(spec, job_environment(request(job)), V0_0_41)
    assert body["tres_per_node"] == "gres/gpu:4"
    assert body["memory_per_node"] == {"set": True, "infinite": False, "number": 8192}
    assert body["cpus_per_task"] == 4


def test_limits_stand_for_requests_and_options_win() -> None:
    job = _with_resources(trainjob("plain", command=["x"]),
                          {"limits": {"nvidia.com/gpu": 2, "memory": "1Gi"}})
    args = sbatch_args(job_spec(request(job), default_chdir="/h"))
    assert "--gpus-per-node=2" in args and "--mem=1024" in args
    args = sbatch_args(job_spec(request(job, SchedulingOptions(gpus_per_node=1,
                                                               mem_per_node_mb=10)),
                                default_chdir="/h"))
    assert "--gpus-per-node=1" in args and "--mem=10" in args
    assert "--gpus-per-node=2" not in args


def test_a_native_dependency_goes_to_sbatch_and_to_each_rest_version() -> None:
    """``SubmitRequest.dependency`` (Slurm's ids, bridge/engine_dependency.py) is
    ``--dependency`` (with ``--kill-on-invalid-dep=yes|no``); over REST the
    ``dependency`` field, and the kill flag as each version spells it. The bridge's own
    dependency text (options.dependency, bridge ids) never reaches Slurm."""
    from dataclasses import replace

    options = SchedulingOptions(dependency="afterok:7", kill_on_invalid_dep=True)
    base = request(trainjob(command=["true"]), options)
    plain = job_spec(base, default_chdir="/tmp")
    assert not any("dependency" in a or "invalid-dep" in a for a in sbatch_args(plain))
    assert "dependency" not in rest_job(plain, {}, V0_0_41)
    spec = job_spec(replace(base, dependency="afterok:123?afternotok:124"),
                    default_chdir="/tmp")
    args = sbatch_args(spec)
    assert "--dependency=afterok:123?afternotok:124" in args
    assert "--kill-on-invalid-dep=yes" in args
    new = rest_job(spec, {}, V0_0_41)
    assert (new["dependency"], new["flags"]) == ("afterok:123?afternotok:124",
                                                 ["KILL_INVALID_DEPENDENCY"])
    old = rest_job(spec, {}, V0_0_38)
    assert old["dependency"] == "afterok:123?afternotok:124"
    assert old["kill_on_invalid_dependency"] is True
    keep_request = request(trainjob(command=["true"]), SchedulingOptions(dependency="afterok:7"))
    keep = job_spec(replace(keep_request, dependency="afterany:5"), default_chdir="/tmp")
    assert "--kill-on-invalid-dep=no" in sbatch_args(keep)  # a site may kill by default
    assert rest_job(keep, {}, V0_0_41)["flags"] == ["NO_KILL_INVALID_DEPENDENCY"]
    assert rest_job(keep, {}, V0_0_38)["kill_on_invalid_dependency"] is False


def test_sbatch_output_env_is_what_sbatch_sets_from_its_options() -> None:
    """As sbatch 24.11 set them for -N2 --ntasks-per-node=2 -c 1 (checked on the bed)."""
    base = JobSpec(name="j", comment="c", nodes=2, chdir="/tmp", output="o")
    assert sbatch_output_env(base) == {}
    spec = replace(base, ntasks_per_node=2, cpus_per_task=1, mem_per_node_mb=500)
    assert sbatch_output_env(spec) == {
        "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_CPUS_PER_TASK": "1", "SLURM_MEM_PER_NODE": "500"}
    # -n wins over nodes x per node; for a node range sbatch leaves the count unset
    # (the allocation decides it), as with -N2-4 --ntasks-per-node=3.
    assert sbatch_output_env(replace(base, ntasks=3, max_nodes=4))["SLURM_NTASKS"] == "3"
    ranged = sbatch_output_env(replace(base, ntasks_per_node=3, max_nodes=4))
    assert ranged == {"SLURM_NTASKS_PER_NODE": "3"}
    assert sbatch_output_env(replace(base, ntasks_per_node=3, max_nodes=2))[
        "SLURM_NPROCS"] == "6"


def test_an_image_runs_behind_the_container_command_on_every_rank(tmp_path: Path) -> None:
    """``{image}`` replaced, nothing else expanded (a hostile image stays one word); a
    job without an image runs as it is; a distributed job's ranks all run behind it."""
    hostile = "x$(touch pwned);`id`'\"{image}"
    job = trainjob("plain", command=["printf", "%s\\0"], args=["a b"], image=hostile)
    script = render_script(request(job), container=("printf", "%s\\0", "img={image}"))
    done = subprocess.run(["bash", "-c", script], capture_output=True, cwd=tmp_path,
                          check=True)
    assert done.stdout.decode().split("\0")[:-1] == [
        f"img={hostile}", "printf", "%s\\0", "a b"]
    assert not (tmp_path / "pwned").exists()
    plain = trainjob("plain", command=["true"])
    assert render_script(request(plain), container=("run", "{image}")).endswith(
        "exec true\n")
    torch = trainjob("torch-distributed", nodes=2, command=["torchrun", "t.py"], image="i:1")
    argv = launch_command(RuntimeCatalog().resolve(torch), container=["run", "{image}"])
    assert argv[argv.index("--") + 1:] == ["run", "{image}", "torchrun", "t.py"]
    assert container_prefix(("run", "{image}"), "i:1") == ["run", "i:1"]
    assert container_prefix(("run", "{image}"), None) == []


def test_a_container_command_must_name_the_image() -> None:
    with pytest.raises(ValueError, match=r"no word holds \{image\}"):
        SlurmSettings(container_command=["apptainer", "exec"])
    assert SlurmSettings(container_command=["run", "docker://{image}"]).container_command


def test_a_trainjob_files_path_is_the_jobs_where_its_trainer_sets_none() -> None:
    """``tbatch -f`` records tbatch's PATH (``submit_path``): the job's PATH, unless the
    trainer sets one; without either, the system default."""
    bare = trainjob("plain", command=["true"])
    assert job_environment(request(bare, SchedulingOptions(submit_path="/venv/bin")))[
        "PATH"] == "/venv/bin"
    own = trainjob("plain", command=["true"], env={"PATH": "/mine"})
    assert job_environment(request(own, SchedulingOptions(submit_path="/venv/bin")))[
        "PATH"] == "/mine"
    assert job_environment(request(bare))["PATH"] == DEFAULT_PATH
