"""flux_adapter.jobspec: the jobspec V1 the Flux back end submits (refused options, every
runtime and option, and hypothesis-generated requests: test_flux_jobspec_options.py).

Every generated jobspec is checked against the canonical rules of RFC 14 as RFC 25
restricts them for version 1 (:func:`tests.unit.flux_jobspec_helpers.check_v1`, written
from the RFCs so the test needs no Flux): one ``node>slot>core[,gpu]`` (or
``slot>core[,gpu]``) resource graph, exactly one task whose count is ``per_slot: 1`` or a
``total`` between the node count and the slot count, ``attributes.system.duration``
present.

Golden files live in tests/unit/golden/flux/; rewrite them after an intended change
with ``UPDATE_GOLDEN=1 pytest tests/unit/test_flux_jobspec.py`` and review the diff.
"""

from __future__ import annotations

import stat
from typing import Any

import pytest

from bridge.backend import BackendRejected, SubmitRequest
from bridge.model import TrainJob, load_trainjob
from bridge.runtimes import MpiImplementation
from bridge.scheduling import SchedulingOptions
from flux_adapter.jobspec import (
    DEFAULT_PATH,
    UID_ATTRIBUTE,
    JobspecInfo,
    f58,
    flux_job_name,
    job_environment,
    output_template,
    parse_job_id,
    resolve_output,
    uid_from_name,
)
from tests.unit import golden_files
from tests.unit.builders import ALICE, HOSTILE, UID, trainjob
from tests.unit.flux_jobspec_helpers import (
    MPI_LAUNCH,
    SCRIPT,
    build,
    command_of,
    request,
    shell,
)
from tests.unit.golden_files import check_golden, json_text

GOLDEN = golden_files.GOLDEN / "flux"


# --------------------------------------------------------------------------- helpers


def golden(name: str, data: Any) -> None:
    check_golden(GOLDEN / name, json_text(data))


# --------------------------------------------------------------------------- goldens

CASES: dict[str, tuple[TrainJob, SchedulingOptions]] = {
    "plain.command": (trainjob("plain", command=["python", "train.py"], args=["--epochs", "3"]),
                      SchedulingOptions()),
    "plain.command-2nodes": (trainjob("plain", nodes=2, command=["./driver.sh"]),
                             SchedulingOptions(ntasks=4, time_limit_minutes=30)),
    "plain.script": (trainjob("plain", nodes=2, script=SCRIPT, args=["a b", "c"]),
                     SchedulingOptions(job_name="batch", output="/scratch/%x-%j.out",
                                       error="/scratch/%x-%j.err", partition="pbatch")),
    "mpi-distributed.command": (trainjob("mpi-distributed", nodes=2, procs=4,
                                         command=["python", "allreduce.py"]),
                                SchedulingOptions(cpus_per_task=2)),
    "mpi-distributed.mpirun": (trainjob("mpi-distributed", nodes=2, procs=2,
                                        command=["mpirun", "--bind-to", "none", "./app"]),
                               SchedulingOptions()),
    "mpi-distributed.script": (trainjob("mpi-distributed", nodes=2, procs=2, script=SCRIPT),
                               SchedulingOptions()),
    "deepspeed-distributed.command": (trainjob("deepspeed-distributed", nodes=2,
                                               command=["deepspeed", "train.py"]),
                                      SchedulingOptions(gpus_per_node=4)),
    "torch-distributed.command": (trainjob("torch-distributed", nodes=2, procs=4,
                                           command=["torchrun", "train.py"]),
                                  SchedulingOptions(gpus_per_node=4, exclusive=True)),
    "torch-distributed.auto": (trainjob("torch-distributed", nodes=3,
                                        command=["python", "train.py"]),
                               SchedulingOptions()),
    "torch-distributed.script": (trainjob("torch-distributed", nodes=2, procs=2,
                                          script=SCRIPT),
                                 SchedulingOptions()),
    "jax-distributed.command": (trainjob("jax-distributed", nodes=2, procs=2,
                                         command=["python", "jax_train.py"]),
                                SchedulingOptions(gpus_per_node=2)),
    "xgboost-distributed.command": (trainjob("xgboost-distributed", nodes=2,
                                             command=["python", "xgb.py"]),
                                    SchedulingOptions(ntasks=4)),
    "all_options": (trainjob("mpi-distributed", nodes=4, procs=2, command=["./app"],
                             env={"OMP_NUM_THREADS": "2", "PATH": "/opt/app/bin:/usr/bin"}),
                    SchedulingOptions(
                        job_name="big", partition="pbatch", account="physics",
                        time_limit_minutes=90, ntasks_per_node=2, cpus_per_task=4,
                        gpus_per_node=2, output="logs/%x.%j.%u.out", error="logs/%j.err",
                        chdir="/scratch/alice/run", exclusive=True, export="ALL",
                        nodelist="node[01-04]", exclude="node09", constraint="a100&ib")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    job, options = CASES[name]
    golden(f"{name}.json", build(request(job, options)))


# --------------------------------------------------------------------------- layouts


def test_plain_command_runs_once_as_itself() -> None:
    js = build(request(trainjob("plain", command=["python", "t.py"], args=[HOSTILE])))
    assert command_of(js) == ["python", "t.py", HOSTILE]  # data, not shell text
    assert js["resources"][0]["count"] == 1
    assert "per-resource" not in shell(js)
    assert js["attributes"]["system"]["duration"] == 0.0


def test_plain_on_several_nodes_is_a_nested_instance() -> None:
    js = build(request(trainjob("plain", nodes=3, command=["./driver"])),
               flux_command="/usr/bin/flux")
    assert command_of(js) == ["/usr/bin/flux", "broker", "./driver"]
    assert shell(js)["exit-timeout"] == "none"
    assert shell(js)["pmi"] == "simple"
    assert js["resources"][0]["count"] == 3


def test_batch_script_is_a_file_run_by_a_nested_broker() -> None:
    js = build(request(trainjob("plain", script=SCRIPT, args=[HOSTILE])))
    assert command_of(js) == ["flux", "broker", "{{tmpdir}}/script", HOSTILE]
    files = js["attributes"]["system"]["files"]
    assert files["script"]["data"] == SCRIPT  # verbatim, directives and all
    assert files["script"]["encoding"] == "utf-8"
    assert files["script"]["mode"] == stat.S_IFREG | 0o700


def test_mpi_ranks_are_flux_tasks() -> None:
    js = build(request(trainjob("mpi-distributed", nodes=2, procs=3, command=["./a.out"]),
                       SchedulingOptions(cpus_per_task=2)))
    assert command_of(js) == [MPI_LAUNCH, "--world", "flux", "--runtime", "plain", "--",
                              "./a.out"]
    assert shell(js)["per-resource"] == {"type": "node", "count": 3}
    slot = js["resources"][0]["with"][0]
    assert slot["count"] == 1 and slot["with"][0] == {"type": "core", "count": 6}


def test_mpi_user_launcher_runs_on_node_zero_with_the_hostfile() -> None:
    js = build(request(trainjob("mpi-distributed", nodes=2, procs=2,
                                command=["/usr/bin/mpiexec", "-n", "4", "./a.out"])))
    argv = command_of(js)
    assert argv[:argv.index("--")] == [MPI_LAUNCH, "--world", "flux", "--runtime", "mpi",
                                       "--mpi", "openmpi", "--nproc-per-node", "2",
                                       "--hostfile-dir", "{{tmpdir}}"]
    assert "per-resource" not in shell(js)  # one mpi-launch per node; rank 0 runs it
    assert shell(js)["exit-timeout"] == "none"


def test_a_task_of_an_array_writes_flux_A_a_out_by_default() -> None:
    from dataclasses import replace

    from bridge.arrays import ArrayTask, parse
    task = replace(request(trainjob("plain", command=["true"])),
                   array=ArrayTask(40, 3, parse("1-3")))
    assert shell(build(task))["output"]["stdout"]["path"] == "flux-40_3.out"


def test_mpi_flavour_follows_the_runtime() -> None:
    job = trainjob("mpi-distributed", nodes=1, command=["mpiexec", "./a"])
    req = request(job)
    intel = MpiImplementation.parse("IntelMPI")
    plan = req.plan.__class__(**{**req.plan.__dict__, "mpi_implementation": intel})
    js = build(SubmitRequest(job_uid=UID, job_id=1, job=job, plan=plan,
                             options=SchedulingOptions(), owner=ALICE))
    assert command_of(js)[command_of(js).index("--mpi") + 1] == "intel"


def test_torch_is_one_task_per_node_with_its_gpus() -> None:
    js = build(request(trainjob("torch-distributed", nodes=2, procs=4,
                                command=["python", "t.py"]),
                       SchedulingOptions(gpus_per_node=4)))
    assert "per-resource" not in shell(js)
    slot = js["resources"][0]["with"][0]
    assert slot["with"] == [{"type": "core", "count": 4}, {"type": "gpu", "count": 4}]
    assert command_of(js)[4:8] == ["torch", "--nproc-per-node", "4", "--"]


@pytest.mark.parametrize("runtime", ["jax-distributed", "xgboost-distributed"])
def test_per_rank_runtimes(runtime: str) -> None:
    js = build(request(trainjob(runtime, nodes=2, procs=3, command=["python", "x.py"])))
    assert shell(js)["per-resource"] == {"type": "node", "count": 3}
    assert command_of(js)[4:8] == [runtime.split("-")[0], "--nproc-per-node", "3", "--"]


def test_gpus_need_not_divide_among_tasks() -> None:
    js = build(request(trainjob("mpi-distributed", nodes=2, procs=3, command=["./a"]),
                       SchedulingOptions(gpus_per_node=2)))
    assert js["resources"][0]["with"][0]["with"][1] == {"type": "gpu", "count": 2}


def test_uneven_ntasks() -> None:
    # plain: the count only sizes the allocation (rounded up per node)
    js = build(request(trainjob("plain", nodes=2, command=["./x"]),
                       SchedulingOptions(ntasks=5)))
    assert js["resources"][0]["with"][0]["with"][0]["count"] == 3
    # per-rank runtimes would need different counts per node: refused
    with pytest.raises(BackendRejected, match=r"--ntasks=5 does not divide evenly over 2"):
        build(request(trainjob("jax-distributed", nodes=2, command=["./x"]),
                      SchedulingOptions(ntasks=5)))
    with pytest.raises(BackendRejected, match="disagree"):
        build(request(trainjob("mpi-distributed", nodes=2, command=["./x"]),
                      SchedulingOptions(ntasks=6, ntasks_per_node=2)))


# --------------------------------------------------------------------------- attributes


def test_idempotency_key_in_attributes_and_name() -> None:
    req = request(trainjob("plain", command=["true"]), SchedulingOptions(job_name="x.y"))
    js = build(req)
    assert js["attributes"]["user"][UID_ATTRIBUTE] == UID
    name = js["attributes"]["system"]["job"]["name"]
    assert name == flux_job_name(req) == f"x.y.hpc-bridge-{UID}"
    assert uid_from_name(name) == UID
    info = JobspecInfo.from_jobspec(js)
    assert (info.uid, info.name, info.cwd) == (UID, name, "/home/alice")


@pytest.mark.parametrize(("name", "uid"), [
    ("train.hpc-bridge-abc", "abc"), ("a.hpc-bridge-b.hpc-bridge-c", "c"),
    ("train", None), ("train.hpc-bridge-", None), ("x.hpc-bridge-a b", None), (None, None),
    (42, None), ("x.hpc-bridge-a/b", None),
])
def test_uid_from_name(name: object, uid: str | None) -> None:
    assert uid_from_name(name) == uid


def test_time_limit_queue_bank_cwd() -> None:
    js = build(request(trainjob("plain", command=["true"]),
                       SchedulingOptions(time_limit_minutes=61, account="phys",
                                         chdir="/work/a")), default_queue="debug")
    system = js["attributes"]["system"]
    assert system["duration"] == 3660.0
    assert (system["queue"], system["bank"], system["cwd"]) == ("debug", "phys", "/work/a")
    js = build(request(trainjob("plain", command=["true"]),
                       SchedulingOptions(partition="gpu")), default_queue="debug")
    assert js["attributes"]["system"]["queue"] == "gpu"


def test_environment_is_the_plans_plus_path() -> None:
    js = build(request(trainjob("plain", command=["true"], env={"A": HOSTILE})),
               flux_command="/opt/flux/bin/flux")
    assert js["attributes"]["system"]["environment"] == {
        "A": HOSTILE, "PATH": "/opt/flux/bin:" + DEFAULT_PATH, "HPC_BRIDGE_JOB_ID": "42",
        "HPC_BRIDGE_JOB_UID": UID}
    plan = request(trainjob("plain", command=["true"], env={"PATH": "/mine"})).plan
    assert job_environment(plan) == {"PATH": "/mine"}
    # tbatch -f's PATH where the trainer sets none; the trainer's own wins.
    assert job_environment(plan, submit_path="/venv/bin") == {"PATH": "/mine"}
    bare = request(trainjob("plain", command=["true"])).plan
    assert job_environment(bare, submit_path="/venv/bin") == {"PATH": "/venv/bin"}


def test_flux_is_on_the_path_whatever_the_submitter_exported() -> None:
    """tbatch always exports the submitter's PATH; mpi-launch in the job still needs the
    instance's flux (``flux job info``), so its directory goes first."""
    plan = request(trainjob("plain", command=["true"], env={"PATH": "/usr/bin:/bin"})).plan
    env = job_environment(plan, flux_command="/opt/flux-mu/bin/flux")
    assert env["PATH"] == "/opt/flux-mu/bin:/usr/bin:/bin"
    plan = request(trainjob("plain", command=["true"],
                            env={"PATH": "/x:/opt/flux-mu/bin"})).plan
    assert job_environment(plan, flux_command="/opt/flux-mu/bin/flux")["PATH"] == (
        "/x:/opt/flux-mu/bin")  # already there: left as the user ordered it


def test_constraints() -> None:
    js = build(request(trainjob("plain", command=["true"]),
                       SchedulingOptions(nodelist="node1,node2,node3", exclude="node[7-8]",
                                         constraint="a|b")))
    assert js["attributes"]["system"]["constraints"] == {"and": [
        {"hostlist": ["node[1-3]"]},
        {"not": [{"hostlist": ["node[7-8]"]}]},
        {"or": [{"properties": ["a"]}, {"properties": ["b"]}]},
    ]}
    js = build(request(trainjob("plain", command=["true"]), SchedulingOptions(constraint="x")))
    assert js["attributes"]["system"]["constraints"] == {"properties": ["x"]}


def test_engine_placement_becomes_a_hostlist_constraint() -> None:
    class Placement:
        hosts = ("n3", "n1", "n2")

    js = build(request(trainjob("mpi-distributed", nodes=3, command=["./a"]),
                       placement=Placement()))
    assert js["attributes"]["system"]["constraints"] == {"hostlist": ["n[3,1-2]"]}


def test_placement_on_brokers_sharing_a_host_name_becomes_ranks() -> None:
    """The inventory names such brokers box@RANK; Flux is told their ranks."""
    class Placement:
        hosts = ("box@3", "box@0", "box@1")

    js = build(request(trainjob("torch-distributed", nodes=3, command=["./a"]),
                       placement=Placement()))
    assert js["attributes"]["system"]["constraints"] == {"ranks": ["0-1,3"]}

    class Mixed:
        hosts = ("n1", "box@2")

    js = build(request(trainjob("torch-distributed", nodes=2, command=["./a"]),
                       placement=Mixed()))
    assert js["attributes"]["system"]["constraints"] == {
        "or": [{"hostlist": ["n1"]}, {"ranks": ["2"]}]}


@pytest.mark.parametrize(("pattern", "expected"), [
    ("slurm-%j.out", "slurm-{{id.dec}}.out"),
    ("/s/%u/%x-%j.log", "/s/alice/train-{{id.dec}}.log"),
    ("100%%-%j", "100%-{{id.dec}}"),
    ("plain.txt", "plain.txt"),
])
def test_output_patterns(pattern: str, expected: str) -> None:
    assert output_template(pattern, job_name="train", user="alice") == expected


@pytest.mark.parametrize("pattern", ["out-%N.log", "%A_%a.out", "%t", "%5j.out", "%s",
                                     "x-{{id}}.out", "%J"])
def test_output_patterns_flux_cannot_write_are_refused(pattern: str) -> None:
    with pytest.raises(BackendRejected, match="output"):
        output_template(pattern, job_name="train", user="alice")


@pytest.mark.parametrize(("pattern", "name"), [("%x.out", "{{id}}"), ("%x{b}}", "a{"),
                                               ("{%j", "x"), ("%j}", "x")])
def test_a_job_name_that_looks_like_a_template_cannot_reach_a_path(pattern: str,
                                                                    name: str) -> None:
    with pytest.raises(BackendRejected, match="misread"):
        output_template(pattern, job_name=name, user="alice")


def test_default_output_is_resolvable() -> None:
    js = build(request(trainjob("plain", command=["true"])))
    info = JobspecInfo.from_jobspec(js)
    assert info.stdout == "flux-42.out" and info.stderr is None  # the bridge's id
    assert resolve_output(info.stdout, 1234, info.cwd) == "/home/alice/flux-42.out"


def test_a_pattern_with_a_backslash_is_literal() -> None:
    """As Slurm: nothing is expanded (not even to Flux's id), the backslashes go."""
    assert output_template("a\\b-%j.out", job_name="x", user="u") == "ab-%j.out"
    with pytest.raises(BackendRejected, match="misread"):
        output_template("a{\\{b", job_name="x", user="u")


def test_job_id_patterns_name_the_bridge_id() -> None:
    """%j, %J and %A (padded too, which Flux could not express) are the bridge's id."""
    js = build(request(trainjob("plain", command=["true"]),
                       SchedulingOptions(output="o-%j.%5J.%A.%x", error="e-%%j-%j")))
    info = JobspecInfo.from_jobspec(js)
    assert (info.stdout, info.stderr) == ("o-42.00042.42.train", "e-%j-42")


# --------------------------------------------------------------------------- job ids


@pytest.mark.parametrize("job_id", [0, 1, 57, 58, 2**20, 1234567890123, 2**63 - 1])
def test_f58_roundtrip(job_id: int) -> None:
    assert parse_job_id(f58(job_id)) == job_id
    assert parse_job_id("f" + f58(job_id)[1:]) == job_id
    assert parse_job_id(str(job_id)) == job_id


def test_parse_job_id() -> None:
    assert f58(0) == "ƒ1"
    assert parse_job_id(" 0x10\n") == 16
    with pytest.raises(ValueError):
        parse_job_id("nope")
    with pytest.raises(ValueError):
        f58(-1)


def test_resolve_output() -> None:
    assert resolve_output("/a/{{id}}.out", 58, None) == "/a/ƒ21.out"
    assert resolve_output("o-{{id.dec}}", 7, "/w/x/../y") == "/w/y/o-7"
    assert resolve_output("rel", 7, None) is None
    assert resolve_output("{{name}}.out", 7, "/w") is None
    assert resolve_output(None, 7, "/w") is None


# ------------------------------------- resourcesPerNode (issue 10: GPUs were dropped)


def test_resources_per_node_reach_the_jobspec() -> None:
    doc = trainjob("torch-distributed", nodes=2, procs=4, command=["python", "t.py"]).to_dict()
    doc["spec"]["trainer"]["resourcesPerNode"] = {
        "requests": {"cpu": "8", "nvidia.com/gpu": 2}}
    js = build(request(load_trainjob(doc)))
    node = js["resources"][0]
    assert node["count"] == 2
    children = {c["type"]: c["count"] for c in node["with"][0]["with"]}
    assert children == {"core": 8, "gpu": 2}


def test_resources_per_node_memory_is_refused_by_name() -> None:
    doc = trainjob("plain", command=["x"]).to_dict()
    doc["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"memory": "1Gi"}}
    with pytest.raises(BackendRejected, match="resourcesPerNode memory"):
        build(request(load_trainjob(doc)))
