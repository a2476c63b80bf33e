"""tbatch's parser: --wrap, --export, the TrainJob a script becomes, and -f files."""

from __future__ import annotations

import json

import pytest

from bridge.model import ANN_BACKEND, ANN_BATCH_SCRIPT, load_trainjob
from bridge.sbatch import (
    ANN_GPU_TYPE,
    ExportSpec,
    SbatchError,
    exported_environment,
    parse_tbatch,
    to_trainjob,
    trainjob_from_file,
    wrap_script,
)
from bridge.scheduling import scheduling_of
from tests.unit.sbatch_helpers import SH, error_of, job_of, opts, sched

# -------------------------------------------------------------------- --wrap


def test_wrap_generates_sbatch_script() -> None:
    request = parse_tbatch(["--wrap", "echo $HOME; hostname", "-N", "2"])
    assert request.script_text == (
        "#!/bin/sh\n# This script was created by tbatch --wrap.\n\necho $HOME; hostname\n"
    )
    assert request.script_text == wrap_script("echo $HOME; hostname")
    assert request.options.nodes_min == 2
    doc = job_of(["--wrap", "hostname"], None)
    assert sched(doc)["job_name"] == "wrap"
    assert doc["metadata"]["annotations"][ANN_BATCH_SCRIPT].endswith("\nhostname\n")


def test_wrap_with_script_text_is_refused() -> None:
    assert "--wrap generates the batch script" in error_of(["--wrap", "x"], SH)


def test_wrap_command_that_is_a_directive_is_read_like_sbatch() -> None:
    assert parse_tbatch(["--wrap", "#SBATCH -N 3"]).options.nodes_min == 3


# -------------------------------------------------------------------- export


@pytest.mark.parametrize(
    ("value", "spec"),
    [
        ("ALL", ExportSpec(all=True)),
        ("all", ExportSpec(all=True)),
        ("NONE", ExportSpec(all=False)),
        ("none", ExportSpec(all=False)),
        ("EDITOR", ExportSpec(all=False, items=(("EDITOR", None),))),
        ("EDITOR,ARG1=test", ExportSpec(all=False, items=(("EDITOR", None), ("ARG1", "test")))),
        ("ALL,EDITOR=/bin/emacs", ExportSpec(all=True, items=(("EDITOR", "/bin/emacs"),))),
        ("A=x=y", ExportSpec(all=False, items=(("A", "x=y"),))),
        ("A=", ExportSpec(all=False, items=(("A", ""),))),
        ("'A=a,b',B", ExportSpec(all=False, items=(("A", "a,b"), ("B", None)))),
        ("A='a,b'", ExportSpec(all=False, items=(("A", "a,b"),))),
        ('A="a,b",ALL', ExportSpec(all=True, items=(("A", "a,b"),))),
    ],
)
def test_export_forms(value: str, spec: ExportSpec) -> None:
    assert opts([f"--export={value}"]).export == spec


ENV = {
    "PATH": "/usr/bin",
    "EDITOR": "vi",
    "SLURM_CONF": "/etc/slurm.conf",
    "HPC_BRIDGE_TOKEN": "secret",
    "BASH_FUNC_module%%": "() {  eval ...\n}",
}


def test_export_default_is_the_whole_environment() -> None:
    env = exported_environment(None, ENV)
    assert env == {"EDITOR": "vi", "PATH": "/usr/bin", "SLURM_CONF": "/etc/slurm.conf"}
    assert exported_environment(ExportSpec(all=True), ENV) == env


def test_export_none_keeps_only_slurm_variables() -> None:
    assert exported_environment(ExportSpec(all=False), ENV) == {"SLURM_CONF": "/etc/slurm.conf"}


def test_export_list_is_only_those_plus_slurm() -> None:
    spec = ExportSpec(all=False, items=(("EDITOR", None), ("ARG1", "test"), ("UNSET", None)))
    assert exported_environment(spec, ENV) == {
        "ARG1": "test",
        "EDITOR": "vi",
        "SLURM_CONF": "/etc/slurm.conf",
    }


def test_export_all_lets_the_environment_win_like_sbatch_documents() -> None:
    spec = ExportSpec(all=True, items=(("EDITOR", "/bin/emacs"), ("NEW", "1")))
    env = exported_environment(spec, ENV)
    assert env["EDITOR"] == "vi"  # "ALL ... take[s] precedence over explicitly given"
    assert env["NEW"] == "1"


def test_export_token_only_when_named() -> None:
    assert "HPC_BRIDGE_TOKEN" not in exported_environment(None, ENV)
    spec = ExportSpec(all=False, items=(("HPC_BRIDGE_TOKEN", None),))
    assert exported_environment(spec, ENV)["HPC_BRIDGE_TOKEN"] == "secret"


def test_export_into_the_trainjob() -> None:
    doc = job_of(["--export=EDITOR,ARG1=test"], environ=ENV)
    assert doc["spec"]["trainer"]["env"] == [
        {"name": "ARG1", "value": "test"},
        {"name": "EDITOR", "value": "vi"},
        {"name": "SLURM_CONF", "value": "/etc/slurm.conf"},
    ]
    assert sched(doc)["export"] == "NONE"
    assert sched(job_of(["--export=ALL"], environ=ENV))["export"] == "ALL"
    assert "export" not in sched(job_of([], environ=ENV))
    assert "env" not in job_of(["--export=NONE"], environ={"PATH": "/bin"})["spec"]["trainer"]


def test_export_from_a_directive_loses_inner_quotes_like_sbatch() -> None:
    # _get_argument removes the quotes before --export sees the value ...
    spec = opts([], SH + "#SBATCH --export=A='x,y'\n").export
    assert spec == ExportSpec(all=False, items=(("A", "x"), ("y", None)))
    # ... so quote the whole word to keep a comma in a value
    spec = opts([], SH + "#SBATCH --export=\"A='x,y'\"\n").export
    assert spec == ExportSpec(all=False, items=(("A", "x,y"),))


# ------------------------------------------------------------------ TrainJob


def test_trainjob_from_a_script() -> None:
    script = (
        "#!/bin/bash\n"
        "#SBATCH --nodes=2 --ntasks-per-node=4 --cpus-per-task=8\n"
        "#SBATCH --gpus-per-node=a100:4 --mem=64G -t 2:00:00\n"
        "#SBATCH -p gpu -A proj -q high -o out-%j.txt -e err-%j.txt --exclusive\n"
        "#SBATCH --switches=1@5 -w n[1-2] -x n3 -C ib --runtime=torch-distributed\n"
        "#SBATCH --backend=slurm\n"
        'torchrun train.py "$@"\n'
    )
    request = parse_tbatch(["train.sh", "--lr", "0.1"], script)
    job = to_trainjob(request, cwd="/home/alice/exp", environ={"PATH": "/bin"})
    doc = job.to_dict()
    assert doc["metadata"]["name"] == ""
    assert doc["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = doc["spec"]["trainer"]
    assert trainer["numNodes"] == 2
    assert trainer["numProcPerNode"] == 4
    assert trainer["args"] == ["--lr", "0.1"]
    assert trainer["env"] == [{"name": "PATH", "value": "/bin"}]
    resources = {"cpu": 32, "nvidia.com/gpu": 4, "memory": "65536Mi"}
    assert trainer["resourcesPerNode"] == {"requests": resources, "limits": resources}
    assert doc["spec"]["activeDeadlineSeconds"] == 7200
    annotations = doc["metadata"]["annotations"]
    assert annotations[ANN_BATCH_SCRIPT] == script
    assert annotations[ANN_BACKEND] == "slurm"
    assert annotations[ANN_GPU_TYPE] == "a100"
    options = scheduling_of(job)
    assert options.model_dump(exclude_defaults=True) == {
        "job_name": "train.sh",
        "partition": "gpu",
        "account": "proj",
        "qos": "high",
        "time_limit_minutes": 120,
        "ntasks_per_node": 4,
        "cpus_per_task": 8,
        "gpus_per_node": 4,
        "mem_per_node_mb": 65536,
        "output": "out-%j.txt",
        "error": "err-%j.txt",
        "submit_dir": "/home/alice/exp",
        "exclusive": True,
        "switches": 1,
        "switches_wait_minutes": 5,
        "nodelist": "n[1-2]",
        "exclude": "n3",
        "constraint": "ib",
    }
    # the document is a valid TrainJob for the daemon
    assert load_trainjob(doc).to_dict() == doc


def test_minimal_job() -> None:
    doc = job_of(["job.sh"], environ={})
    assert doc["spec"]["runtimeRef"]["name"] == "plain"
    assert doc["spec"]["trainer"] == {"numNodes": 1}
    assert "activeDeadlineSeconds" not in doc["spec"]
    assert ANN_BACKEND not in doc["metadata"]["annotations"]
    assert sched(doc) == {"job_name": "job.sh", "submit_dir": "/home/alice"}


@pytest.mark.parametrize(
    ("argv", "procs", "cpu"),
    [
        (["-N", "2", "-n", "8"], 4, 4),
        (["-N", "2", "-n", "7"], None, 4),  # not divisible: ntasks stays in the options
        (["-n", "6"], 6, 6),
        (["-N", "2", "-n", "6", "-c", "3"], 3, 9),
        (["-c", "5"], None, 5),
        (["-N", "3", "--ntasks-per-node=2", "-n", "5"], 2, 2),
    ],
)
def test_tasks_and_cpus(argv: list[str], procs: int | None, cpu: int) -> None:
    doc = job_of([*argv, "job.sh"])
    trainer = doc["spec"]["trainer"]
    assert trainer.get("numProcPerNode") == procs
    assert trainer["resourcesPerNode"]["requests"]["cpu"] == cpu


def test_ntasks_kept_in_scheduling() -> None:
    assert sched(job_of(["-N", "2", "-n", "7", "job.sh"]))["ntasks"] == 7


def test_fewer_tasks_than_nodes() -> None:
    request = parse_tbatch(["-N", "4", "-n", "2", "job.sh"], SH)
    with pytest.raises(SbatchError, match="--ntasks=2 is less than --nodes=4"):
        to_trainjob(request, cwd="/", environ={})


def test_nodes_range_uses_the_minimum() -> None:
    assert job_of(["-N", "2-4", "job.sh"])["spec"]["trainer"]["numNodes"] == 2


def test_unlimited_time_sets_no_deadline() -> None:
    doc = job_of(["-t", "UNLIMITED", "job.sh"])
    assert "activeDeadlineSeconds" not in doc["spec"]
    assert "time_limit_minutes" not in sched(doc)


def test_zero_gpus_request_nothing() -> None:
    doc = job_of(["--gpus-per-node=0", "job.sh"])
    assert "resourcesPerNode" not in doc["spec"]["trainer"]
    assert sched(doc)["gpus_per_node"] == 0


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["job.sh"], "job.sh"),
        (["dir/sub/run.sbatch"], "run.sbatch"),
        (["-J", "mine", "job.sh"], "mine"),
        ([], "tbatch"),  # script from stdin (sbatch says "sbatch")
        (["-"], "tbatch"),
    ],
)
def test_default_job_name(argv: list[str], name: str) -> None:
    assert sched(job_of(argv))["job_name"] == name


@pytest.mark.parametrize(
    ("chdir", "expected"),
    [(None, "/home/alice"), ("/abs", "/abs"), ("rel/dir", "/home/alice/rel/dir")],
)
def test_chdir(chdir: str | None, expected: str) -> None:
    """-D relative to the submitting directory; without it the job gets none, and the
    submitting directory (kept apart, only then) is where back ends with a shared file
    system run it."""
    argv = ["-D", chdir] if chdir else []
    options = sched(job_of([*argv, "job.sh"]))
    assert options.get("chdir") == (expected if chdir else None)
    assert options.get("submit_dir") == (None if chdir else "/home/alice")


def test_hostile_strings_are_kept_verbatim() -> None:
    nasty = "a'b\"c $(rm -rf ~) `id` ${HOME} ; | & \\ ü 漢字 🚀 %j"
    big = "v" * 10_000
    script = SH + f"#SBATCH --job-name={json.dumps(nasty, ensure_ascii=False)}\necho {nasty}\n"
    request = parse_tbatch(["-o", nasty, "job.sh", nasty, "$(id)"], script)
    job = to_trainjob(request, cwd="/home/al ice", environ={"NASTY": nasty, "BIG": big})
    doc = job.to_dict()
    options = scheduling_of(job)
    assert options.job_name == nasty
    assert options.output == nasty
    assert options.chdir is None and options.submit_dir == "/home/al ice"
    assert doc["spec"]["trainer"]["args"] == [nasty, "$(id)"]
    assert {"name": "NASTY", "value": nasty} in doc["spec"]["trainer"]["env"]
    assert {"name": "BIG", "value": big} in doc["spec"]["trainer"]["env"]
    assert doc["metadata"]["annotations"][ANN_BATCH_SCRIPT] == script


def test_control_characters_in_a_directive_name_the_line() -> None:
    message = error_of(["job.sh"], SH + "#SBATCH -J a\tb\n")
    # the tab separates words on a #SBATCH line, so 'b' is an operand
    assert message.startswith("tbatch: error: job.sh:2: ")
    message = error_of(["job.sh"], SH + "#SBATCH -J 'a\tb'\n")
    assert message == (
        "tbatch: error: job.sh:2: invalid --job-name value 'a\\tb': contains "
        "control characters (newline, tab, ...)"
    )


def test_control_characters_in_cwd_are_refused() -> None:
    request = parse_tbatch(["job.sh"], SH)
    with pytest.raises(SbatchError, match="invalid the current directory: path contains control"):
        to_trainjob(request, cwd="/tmp/a\nb", environ={})


def test_invalid_values_from_the_model_are_sbatch_errors() -> None:
    with pytest.raises(SbatchError) as info:  # the model's limit, checked as an option
        parse_tbatch(["-N", "200000", "job.sh"], SH)
    assert str(info.value) == (
        "tbatch: error: invalid --nodes value '200000': node count must be <= 100000")
    request = parse_tbatch(["job.sh", "a\x00b"], SH)
    with pytest.raises(SbatchError, match=r"spec\.trainer\.args: contains a NUL byte"):
        to_trainjob(request, cwd="/", environ={})
    request = parse_tbatch(["--export=ALL", "job.sh"], SH)
    with pytest.raises(SbatchError, match=r"spec\.trainer\.env"):
        to_trainjob(request, cwd="/", environ={"HUGE": "x" * 200_000})


def test_unexportable_environment_entries_are_skipped_under_all() -> None:
    env = {"OK": "1", "BAD NAME": "x", "BASH_FUNC_f%%": "() { :; }", "RAW": "\udcff"}
    assert exported_environment(None, env) == {"OK": "1"}
    with pytest.raises(SbatchError, match="RAW is not valid UTF-8"):
        exported_environment(ExportSpec(all=False, items=(("RAW", None),)), env)


# -------------------------------------------------------------------------- -f

TRAINJOB_YAML = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: bert
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    numNodes: 2
    command: [torchrun, train.py]
"""


def test_trainjob_file() -> None:
    request = parse_tbatch(["-f", "job.yaml", "--backend", "kubernetes", "--parsable"])
    assert request.trainjob_file == "job.yaml"
    assert request.parsable
    job = trainjob_from_file(request, TRAINJOB_YAML)
    assert job.metadata.name == "bert"
    assert job.metadata.annotations[ANN_BACKEND] == "kubernetes"


def test_trainjob_file_errors_name_the_file() -> None:
    request = parse_tbatch(["-f", "job.yaml"])
    with pytest.raises(SbatchError) as info:
        trainjob_from_file(request, TRAINJOB_YAML.replace("numNodes: 2", "numNodes: 0"))
    assert str(info.value) == "tbatch: error: job.yaml: spec.trainer.numNodes: must be >= 1, got 0"
    with pytest.raises(SbatchError, match=r"^tbatch: error: job\.yaml:\d+:\d+: malformed YAML"):
        trainjob_from_file(request, "a: [")
    with pytest.raises(SbatchError, match="a batch script cannot be given"):
        parse_tbatch(["-f", "job.yaml"], SH)
    with pytest.raises(SbatchError, match="use trainjob_from_file"):
        to_trainjob(request, cwd="/", environ={})



@pytest.mark.parametrize(("argv", "nodes"), [
    (["-n", "8", "--ntasks-per-node=2"], 4), (["-n", "7", "--ntasks-per-node=2"], 4),
    (["-N", "2", "-n", "8", "--ntasks-per-node=4"], 2), (["-n", "8"], 1), ([], 1)])
def test_nodes_come_from_tasks_over_tasks_per_node_without_n(argv: list[str],
                                                             nodes: int) -> None:
    """As sbatch: ``-n 8 --ntasks-per-node=2`` with no ``-N`` is four nodes (the
    corpus's Intel MPI script, tests/integration/sbatch_corpus/07-*)."""
    assert job_of([*argv, "job.sh"])["spec"]["trainer"]["numNodes"] == nodes
