"""k8s_adapter.jobset: TrainJob → JobSet as Kubeflow Trainer lays it out.

Requests are built the way the engine builds them (``bridge/engine.py`` ``_request``):
``load_trainjob`` + ``RuntimeCatalog().resolve``. Pod names are checked against
``mpi_launch.allocation.jobset_allocation`` / ``from_jobset_env`` and hostfiles against
``mpi_launch.hostfile.render_hostfile``, so the JobSet and ``mpi-launch`` cannot drift.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bridge.backend import BackendRejected, BackendState, SubmitRequest
from bridge.model import ANN_SCHEDULING, TrainJob, load_document
from bridge.placement import Placement
from bridge.runtimes import BUILTIN_IMAGES, RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from k8s_adapter.jobset import (
    COMPLETION_INDEX,
    HOSTFILE_DIR,
    HOSTFILE_KEY,
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SSHD_COMMAND,
    TRAINJOB_NAME_LABEL,
    UID_LABEL,
    JobSetOptions,
    hostfile_configmap,
    hostfile_configmap_name,
    jobset_name,
    needs_hostfile,
    render_jobset,
)
from k8s_adapter.jobset_merge import merge
from k8s_adapter.jobset_status import (
    backend_job_from_jobset,
    container_failure,
    failure_message,
    replicated_jobs_status,
    split_id,
)
from mpi_launch.allocation import Host, from_jobset_env, jobset_allocation
from mpi_launch.hostfile import render_hostfile
from tests.unit import builders
from tests.unit.builders import IMAGE, UID
from tests.unit.builders import submit_request as request

UID2 = "00000000-0000-4000-8000-000000000002"
HOSTILE = "it's \"quoted\" $(touch /tmp/pwned) `touch /tmp/pwned` ${HOME} ;\n rm -rf / # é✓"
SCRIPT = "#!/bin/bash\n#SBATCH -N 2\nset -e\necho \"$@\" '$(x)' `y`\n"
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_NAME = 63 - len("-launcher-0-") - 5
OPTS = JobSetOptions()


def trainjob(runtime: str = "torch-distributed", *, nodes: int | None = 2,
             image: str | None = IMAGE, command: list[str] | None = None,
             script: str | None = None, **fields: Any) -> TrainJob:
    """:func:`tests.unit.builders.trainjob` with this module's defaults: a torchrun job
    on two nodes with an image (no command given and no script: ``torchrun train.py``)."""
    if command is None and script is None:
        command = ["torchrun", "train.py"]
    return builders.trainjob(runtime, nodes=nodes, image=image, command=command,
                             script=script, **fields)


def render(job: TrainJob, options: JobSetOptions = OPTS, **kwargs: Any) -> dict[str, Any]:
    body = render_jobset(request(job, **kwargs), options)
    assert json.loads(json.dumps(body)) == body, "a JobSet must be plain JSON data"
    return body


def rjobs(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {rj["name"]: rj for rj in body["spec"]["replicatedJobs"]}


def pod(body: Mapping[str, Any], rjob: str = "node") -> dict[str, Any]:
    template: dict[str, Any] = rjobs(body)[rjob]["template"]["spec"]["template"]
    return template


def container(body: Mapping[str, Any], rjob: str = "node") -> dict[str, Any]:
    containers = pod(body, rjob)["spec"]["containers"]
    assert [c["name"] for c in containers] == ["node"]
    c: dict[str, Any] = containers[0]
    return c


def env_of(body: Mapping[str, Any], rjob: str = "node") -> dict[str, Any]:
    """name -> value (or the valueFrom mapping); names must be unique."""
    items = container(body, rjob)["env"]
    names = [e["name"] for e in items]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in items}


INDEX_REF = {"fieldRef": {"fieldPath": COMPLETION_INDEX}}


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_trainer_layout(nodes: int) -> None:
    body = render(trainjob(nodes=nodes))
    assert body["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and body["kind"] == "JobSet"
    assert body["metadata"]["name"] == "train" and body["metadata"]["namespace"] == "team-a"
    assert list(rjobs(body)) == ["node"]
    rj = rjobs(body)["node"]
    assert rj["replicas"] == 1
    job = rj["template"]["spec"]
    assert job["parallelism"] == job["completions"] == nodes
    # Trainer's JobSets: restartPolicy and backoffLimit as the runtime's template says,
    # else JobSet's OnFailure and Kubernetes' backoffLimit (unset: 6); no failurePolicy.
    assert job["completionMode"] == "Indexed" and "backoffLimit" not in job
    assert job["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert "failurePolicy" not in body["spec"]
    assert container(body)["image"] == IMAGE
    assert body["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": "train",
                                       "publishNotReadyAddresses": True}
    assert body["spec"]["successPolicy"]["targetReplicatedJobs"] == ["node"]
    assert body["spec"]["suspend"] is False
    identity = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, UID_LABEL: UID, JOB_ID_LABEL: "42",
                TRAINJOB_NAME_LABEL: "train"}
    assert identity.items() <= body["metadata"]["labels"].items()
    assert identity.items() <= pod(body)["metadata"]["labels"].items()
    assert "activeDeadlineSeconds" not in job
    assert "affinity" not in job["template"]["spec"]
    assert not needs_hostfile(request(trainjob(nodes=nodes)))


def test_suspend_and_options_propagate() -> None:
    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
             "name": "train", "uid": UID, "controller": True}
    opts = JobSetOptions(service_account="runner", scheduler_name="gang")
    body = render_jobset(request(trainjob(suspend=True)), opts, owner)
    assert body["spec"]["suspend"] is True
    assert body["metadata"]["ownerReferences"] == [owner]
    spec = pod(body)["spec"]
    assert spec["serviceAccountName"] == "runner" and spec["schedulerName"] == "gang"


# --------------------------------------------------------------------------- rank env


@pytest.mark.parametrize(("nodes", "procs", "nproc"), [(1, None, "1"), (3, 4, "4"),
                                                       (2, "auto", "1")])
def test_torch_env(nodes: int, procs: int | str | None, nproc: str) -> None:
    body = render(trainjob(nodes=nodes, procs=procs))
    env = env_of(body)
    master = jobset_allocation("train", nodes=nodes, slots=1, pod_index=0).names[0]
    assert master == "train-node-0-0.train"
    assert env["PET_MASTER_ADDR"] == master
    assert env["PET_NNODES"] == str(nodes)
    assert env["PET_NPROC_PER_NODE"] == nproc
    assert env["PET_MASTER_PORT"] == "29500"  # Trainer's ContainerTrainerPort
    assert env["PET_NODE_RANK"] == INDEX_REF
    assert container(body)["ports"] == [{"containerPort": 29500}]


GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(("procs", "resources", "nproc"), [
    # no resourcesPerNode: written as it is
    # Trainer v2.3: auto without resources counts no GPU: 1
    (None, None, "1"), ("gpu", None, "gpu"), ("cpu", None, "cpu"), (3, None, "3"),
    # auto: CPUs of a list without a GPU (limits first), auto with a GPU
    (None, {"requests": {"cpu": "2"}}, "2"),
    # Trainer v2.3 (getNumCPUPerNode): the requests' CPUs first, the limits' when none
    ("auto", {"limits": {"cpu": "4"}, "requests": {"cpu": "2"}}, "2"),
    ("auto", {"limits": {"cpu": "4"}, "requests": {"memory": "1Gi"}}, "4"),
    # a GPU asked for 0 times is no GPU: the CPUs count
    ("auto", {"requests": {"cpu": "3", GPU: "0"}}, "3"),
    ("auto", {"requests": {"cpu": "500m"}}, "1"),
    ("auto", {"requests": {"memory": "1Gi"}}, "1"),
    ("auto", {"requests": {"cpu": "8", GPU: "2"}, "limits": {GPU: "2"}}, "auto"),
    ("auto", {"requests": {"amd.com/GPU": "1"}}, "auto"),
    # Trainer v2.3 counts the GPUs of the limits when the requests have none
    ("auto", {"limits": {GPU: "2"}}, "auto"),
    # cpu: the cpu entry, else 1
    ("cpu", {"requests": {"cpu": "6", GPU: "1"}}, "6"),
    ("cpu", {"requests": {GPU: "1"}}, "1"),
    # a number or gpu: kept
    (4, {"requests": {"cpu": "8"}}, "4"), ("gpu", {"requests": {GPU: "4"}}, "gpu"),
])
def test_torch_nproc_per_node_as_trainer_resolves_it(
        procs: int | str | None, resources: dict[str, Any] | None, nproc: str) -> None:
    env = env_of(render(trainjob(procs=procs, resources=resources)))
    assert env["PET_NPROC_PER_NODE"] == nproc


def test_an_explicit_ntasks_per_node_is_the_nproc_per_node() -> None:
    job = trainjob(resources={"requests": {GPU: "8"}})
    env = env_of(render_jobset(request(job, SchedulingOptions(ntasks_per_node=2)), OPTS))
    assert env["PET_NPROC_PER_NODE"] == "2"


def test_restart_policy_and_backoff_come_from_the_runtime_template() -> None:
    job = trainjob()
    req = request(job)
    template = {"spec": {"failurePolicy": {"maxRestarts": 2},
                         "replicatedJobs": [{"name": "node", "template": {"spec": {
                             "backoffLimit": 1,
                             "template": {"spec": {"restartPolicy": "Never"}}}}}]}}
    req.plan.extra["template"] = template
    body = render_jobset(req, OPTS)
    spec = rjobs(body)["node"]["template"]["spec"]
    assert spec["backoffLimit"] == 1 and spec["template"]["spec"]["restartPolicy"] == "Never"
    assert body["spec"]["failurePolicy"] == {"maxRestarts": 2}


@pytest.mark.parametrize("runtime", ["plain", "torch-distributed", "mpi-distributed"])
def test_a_batch_script_is_never_run_again(runtime: str) -> None:
    """tbatch's script has sbatch's semantics on Kubernetes too: a failed script is not
    restarted in its pod nor retried by its Job (``--requeue`` is refused there)."""
    req = request(trainjob(runtime, nodes=2, script="#!/bin/bash\necho hi >> out\n"))
    # Even a runtime whose template restarts the set or retries its Jobs.
    req.plan.extra["template"] = {"spec": {"failurePolicy": {"maxRestarts": 3},
                                           "replicatedJobs": [{"name": "node", "template": {
                                               "spec": {"backoffLimit": 5}}}]}}
    body = render_jobset(req, OPTS)
    for job in rjobs(body).values():
        spec = job["template"]["spec"]
        assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
    assert "failurePolicy" not in body["spec"]


def test_a_job_patch_may_set_its_own_restart_policy_and_backoff() -> None:
    patch = {"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {
            "backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never"}}}}}]}}}}
    spec = rjobs(render(trainjob(patches=[patch])))["node"]["template"]["spec"]
    assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("runtime", ["torch-distributed", "jax-distributed",
                                     "xgboost-distributed", "plain"])
def test_mpi_launch_inside_each_pod_sees_the_pod_dns_names(runtime: str) -> None:
    """The JOBSET_* variables plus what Kubernetes adds give mpi-launch the same hosts,
    in the same order, in every pod; the pod's rank is its completion index."""
    body = render(trainjob(runtime, nodes=3, procs=2))
    static = {k: v for k, v in env_of(body).items() if isinstance(v, str)}
    expected = [f"train-node-0-{i}.train" for i in range(3)]
    for index in range(3):
        alloc = from_jobset_env({**static, "JOB_COMPLETION_INDEX": str(index),
                                 "HOSTNAME": f"train-node-0-{index}"})
        assert list(alloc.names) == expected
        assert alloc.node_rank == index


def test_jax_env() -> None:
    env = env_of(render(trainjob("jax-distributed", nodes=4)))
    assert env["JAX_NUM_PROCESSES"] == "4"
    assert env["JAX_COORDINATOR_ADDRESS"] == "train-node-0-0.train:29500"
    assert env["JAX_PROCESS_ID"] == INDEX_REF
    assert not any(k.startswith(("PET_", "DMLC_")) for k in env)


def test_xgboost_env() -> None:
    env = env_of(render(trainjob("xgboost-distributed", nodes=3)))
    assert env["DMLC_TRACKER_URI"] == "train-node-0-0.train"
    assert env["DMLC_TRACKER_PORT"] == "29500"
    assert env["DMLC_NUM_WORKER"] == "3"
    assert env["DMLC_TASK_ID"] == INDEX_REF
    assert not any(k.startswith(("PET_", "JAX_")) for k in env)


def test_plain_env_has_only_the_bridge_variables() -> None:
    env = env_of(render(trainjob("plain", nodes=1, command=["echo", "hi"],
                                 env={"FOO": "bar"})))
    assert env["FOO"] == "bar" and env["JOBSET_NAME"] == "train"
    assert env["HPC_BRIDGE_JOB_UID"] == UID and env["HPC_BRIDGE_JOB_ID"] == "42"
    assert not any(k.startswith(("PET_", "JAX_", "DMLC_", "OMPI_")) for k in env)


# --------------------------------------------------------------------------- MPI


def _mpi_hosts(name: str, nodes: int, slots: int) -> list[Host]:
    launcher = jobset_allocation(name, nodes=1, slots=slots, pod_index=0,
                                 replicated_job="launcher").hosts
    workers = (jobset_allocation(name, nodes=nodes - 1, slots=slots, pod_index=0).hosts
               if nodes > 1 else ())
    return [*launcher, *workers]


@pytest.mark.parametrize("runtime", ["mpi-distributed", "deepspeed-distributed"])
@pytest.mark.parametrize("nodes", [2, 4])
def test_mpi_launcher_and_nodes(runtime: str, nodes: int) -> None:
    job = trainjob(runtime, nodes=nodes, procs=2, command=["mpirun", "python", "x.py"])
    req = request(job)
    body = render_jobset(req, OPTS)
    assert list(rjobs(body)) == ["launcher", "node"]
    launcher = rjobs(body)["launcher"]["template"]["spec"]
    workers = rjobs(body)["node"]["template"]["spec"]
    assert launcher["parallelism"] == launcher["completions"] == 1
    assert workers["parallelism"] == workers["completions"] == nodes - 1
    assert body["spec"]["successPolicy"] == {"operator": "All",
                                             "targetReplicatedJobs": ["launcher"]}
    assert container(body, "launcher")["command"] == ["mpirun", "python", "x.py"]
    assert container(body, "node")["command"] == list(SSHD_COMMAND)
    assert UID_LABEL in pod(body, "launcher")["metadata"]["labels"]
    assert needs_hostfile(req)

    cm = hostfile_configmap("train", "team-a", req, owner_uid="js-uid")
    assert cm["metadata"]["name"] == hostfile_configmap_name("train") == "train-mpi-hostfile"
    assert cm["metadata"]["labels"][UID_LABEL] == UID
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "js-uid"
    expected = render_hostfile("openmpi", _mpi_hosts("train", nodes, 2))
    assert cm["data"][HOSTFILE_KEY] == expected
    assert expected.splitlines()[0] == "train-launcher-0-0.train slots=2"
    assert len(expected.splitlines()) == nodes

    for rjob in ("launcher", "node"):
        spec = pod(body, rjob)["spec"]
        mounts = {m["name"]: m["mountPath"] for m in container(body, rjob)["volumeMounts"]}
        volume = next(v for v in spec["volumes"] if v["name"] in mounts)
        assert volume["configMap"]["name"] == cm["metadata"]["name"]
        item = volume["configMap"]["items"][0]
        assert item["key"] == HOSTFILE_KEY
        path = f"{mounts[volume['name']]}/{item['path']}"
        env = env_of(body, rjob)
        assert env["OMPI_MCA_orte_default_hostfile"] == path == f"{HOSTFILE_DIR}/hostfile"
        assert env["PRTE_MCA_prte_default_hostfile"] == path
        assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"


def test_mpi_single_node_has_only_the_launcher() -> None:
    req = request(trainjob("mpi-distributed", nodes=1, command=["mpirun", "a.out"]))
    body = render_jobset(req, OPTS)
    assert list(rjobs(body)) == ["launcher"]
    assert body["spec"]["successPolicy"]["targetReplicatedJobs"] == ["launcher"]
    text = hostfile_configmap("train", "team-a", req, None)["data"][HOSTFILE_KEY]
    assert text == render_hostfile("openmpi", _mpi_hosts("train", 1, 1))
    assert "ownerReferences" not in hostfile_configmap("train", "team-a", req, None)["metadata"]


def test_mpich_runtime_names_its_hostfile() -> None:
    runtime = load_document({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "mpich", "labels": {"trainer.kubeflow.org/framework": "mpi"}},
        "spec": {"mlPolicy": {"numNodes": 1, "mpi": {"mpiImplementation": "MPICH",
                                                    "numProcPerNode": 2}}}})
    catalog = RuntimeCatalog([runtime])  # type: ignore[list-item]
    req = request(trainjob("mpich", nodes=3, command=["mpiexec", "a.out"]), catalog=catalog)
    body = render_jobset(req, OPTS)
    env = env_of(body, "launcher")
    assert env["HYDRA_HOST_FILE"] == f"{HOSTFILE_DIR}/{HOSTFILE_KEY}"
    assert "OMPI_MCA_orte_default_hostfile" not in env
    text = hostfile_configmap("train", "team-a", req, None)["data"][HOSTFILE_KEY]
    assert text == render_hostfile("mpich", _mpi_hosts("train", 3, 2))


# --------------------------------------------------------------------------- argv


_hostile = st.one_of(st.sampled_from([HOSTILE, "", " ", "'", '"', "$(id)", "`id`", "\n",
                                      "a b", "--x=$(y)", "\\", "*", "~"]),
                     st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                             max_size=40))
_env_names = st.from_regex(r"USER_[A-Z0-9_]{1,8}", fullmatch=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runtime=st.sampled_from(["plain", "torch-distributed", "mpi-distributed",
                                "jax-distributed"]),
       command=st.lists(_hostile, min_size=1, max_size=4),
       args=st.lists(_hostile, max_size=4),
       env=st.dictionaries(_env_names, _hostile, max_size=4),
       script=st.one_of(st.none(), _hostile.map(lambda s: "#!/bin/bash\n" + s)))
def test_hostile_strings_survive_as_list_elements(runtime: str, command: list[str],
                                                  args: list[str], env: dict[str, str],
                                                  script: str | None) -> None:
    job = trainjob(runtime, nodes=2, command=None if script is not None else command,
                   args=args, env=env, script=script)
    body = render(job)
    # MPI runs the command (or the tbatch script, as on Slurm) once, in the launcher.
    rjob = "launcher" if runtime == "mpi-distributed" else "node"
    c = container(body, rjob)
    if script is not None:
        # The whole script is ONE argv element of bash; nothing else is a shell string.
        assert c["command"] == ["/bin/bash", "-c", script, "tbatch-script"]
    else:
        assert c["command"] == command
    assert c.get("args", []) == args
    values = env_of(body, rjob)
    for k, v in env.items():
        assert values[k] == v


def test_batch_script_is_one_bash_argument() -> None:
    body = render(trainjob("plain", nodes=1, script=SCRIPT, args=[HOSTILE]))
    c = container(body)
    assert c["command"] == ["/bin/bash", "-c", SCRIPT, "tbatch-script"]
    assert c["args"] == [HOSTILE]


# --------------------------------------------------------------------------- image


def test_missing_image_is_refused_naming_the_field() -> None:
    bare = builders.bare_catalog()  # a runtime without trainer container: no image
    job = trainjob("torch-bare", image=None)
    with pytest.raises(BackendRejected, match=r"spec\.trainer\.image"):
        render_jobset(request(job, catalog=bare), OPTS)
    body = render_jobset(request(job, catalog=bare), JobSetOptions(default_image="default:1"))
    assert container(body)["image"] == "default:1"
    # The job's own image wins over the default.
    body = render_jobset(request(trainjob()), JobSetOptions(default_image="default:1"))
    assert container(body)["image"] == IMAGE


@pytest.mark.parametrize("runtime", ["torch-distributed", "mpi-distributed", "plain"])
def test_the_runtimes_image_is_used_when_the_job_names_none(runtime: str) -> None:
    """A built-in runtime's image, unless the site set ``default_image`` (a mirror for
    an offline cluster): that goes first; the job's own image goes before both."""
    rjob = "launcher" if runtime.startswith("mpi") else "node"
    body = render_jobset(request(trainjob(runtime, image=None)), JobSetOptions())
    assert container(body, rjob)["image"] == BUILTIN_IMAGES[runtime]
    assert container(body, rjob)["command"] == ["torchrun", "train.py"]  # the job's
    site = render_jobset(request(trainjob(runtime, image=None)),
                         JobSetOptions(default_image="mirror.site/trainer:1"))
    assert container(site, rjob)["image"] == "mirror.site/trainer:1"
    own = render_jobset(request(trainjob(runtime, image="mine:2")),
                        JobSetOptions(default_image="mirror.site/trainer:1"))
    assert container(own, rjob)["image"] == "mine:2"


# --------------------------------------------------------------------------- names


def _named(name: str, uid: str = UID) -> SubmitRequest:
    req = request(trainjob(name="x"), uid=uid)
    req.job.metadata.name = name  # any text, as if another front door let it through
    return req


@settings(max_examples=120, deadline=None)
@given(name=st.one_of(st.text(max_size=80),
                      st.from_regex(r"[a-z][-a-z0-9]{0,70}", fullmatch=True),
                      st.from_regex(r"[0-9A-Z._-][a-zA-Z0-9._-]{0,70}", fullmatch=True)))
@example(name="")
@example(name="-")
@example(name="a" * 46)
@example(name="a" * 47)
@example(name="a" * 37 + "-" * 10 + "b")
@example(name="ÉÉÉ")
@example(name="1234")
def test_jobset_name_is_a_short_dns1035_label(name: str) -> None:
    # A DNS-1035 name followed by one "\n" is a known bug: test_jobset_name_trailing_newline.
    assume(not name.endswith("\n"))
    a, a_again, b = (jobset_name(_named(name)), jobset_name(_named(name)),
                     jobset_name(_named(name, UID2)))
    for got in (a, b):
        assert DNS1035.fullmatch(got), got
        assert len(got) <= MAX_NAME
    assert a == a_again
    if a == name:
        assert b == name  # a valid name is kept whatever the uid
    else:
        assert a != b  # a changed name carries the uid's hash
    # Every pod hostname stays a DNS label.
    assert len(f"{a}-launcher-0-99999") <= 63


def test_jobset_name_keeps_valid_names() -> None:
    assert jobset_name(_named("train")) == "train"
    assert jobset_name(_named("a" * MAX_NAME)) == "a" * MAX_NAME
    long = jobset_name(_named("a" * (MAX_NAME + 1)))
    assert long != "a" * (MAX_NAME + 1) and long.startswith("aaaa")


def test_an_mpi_jobs_name_leaves_room_for_its_launcher_pod() -> None:
    """JobSet's webhook refuses a JobSet whose launcher pod name (``<name>-launcher-0-0``
    and the Job controller's 5-character suffix) passes 63 characters: 44 at most."""
    def named(name: str, runtime: str) -> SubmitRequest:
        req = request(trainjob(runtime, name="x", command=["mpirun", "t"]))
        req.job.metadata.name = name
        return req

    assert jobset_name(named("a" * 44, "mpi-distributed")) == "a" * 44
    for length in (45, 46):
        got = jobset_name(named("a" * length, "mpi-distributed"))
        assert len(got) <= 44 and len(f"{got}-launcher-0-0-abcde") <= 63, got
    assert jobset_name(named("a" * 46, "torch-distributed")) == "a" * 46  # no launcher


def test_jobset_name_trailing_newline() -> None:
    assert DNS1035.fullmatch(jobset_name(_named("abc\n")))


# --------------------------------------------------------------------------- patches


def _patch(replicated: list[dict[str, Any]] | None = None,
           metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {}
    if metadata is not None:
        template["metadata"] = metadata
    if replicated is not None:
        template["spec"] = {"replicatedJobs": replicated}
    return {"manager": "tests.hpc-bridge.io", "trainingRuntimeSpec": {"template": template}}


def _pod_patch(rjob: str, pod_template: dict[str, Any]) -> dict[str, Any]:
    return {"name": rjob, "template": {"spec": {"template": pod_template}}}


def test_runtime_patch_pod_fields() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    patch = _patch([_pod_patch("node", {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": HOSTILE}},
        "spec": {"nodeSelector": {"topology.hpc-bridge.io/rack": "rack-1"},
                 "tolerations": [toleration]}})],
        metadata={"labels": {"js": "yes"}, "annotations": {"js-note": "1"}})
    body = render(trainjob(patches=[patch]))
    p = pod(body)
    assert p["metadata"]["labels"]["team"] == "a"
    assert p["metadata"]["labels"][UID_LABEL] == UID
    assert p["metadata"]["annotations"] == {"note": HOSTILE}
    assert p["spec"]["nodeSelector"] == {"topology.hpc-bridge.io/rack": "rack-1"}
    assert p["spec"]["tolerations"] == [toleration]
    assert p["spec"]["restartPolicy"] == "OnFailure"  # the rest of the pod is kept
    assert container(body)["image"] == IMAGE
    assert body["metadata"]["labels"]["js"] == "yes"
    assert body["metadata"]["annotations"]["js-note"] == "1"
    assert body["metadata"]["annotations"][UID_LABEL] == UID


def test_runtime_patch_reaches_only_the_named_replicated_job() -> None:
    patch = _patch([_pod_patch("launcher", {"spec": {"nodeSelector": {"role": "head"}}})])
    body = render(trainjob("mpi-distributed", nodes=3, command=["mpirun", "x"],
                           patches=[patch]))
    assert pod(body, "launcher")["spec"]["nodeSelector"] == {"role": "head"}
    assert "nodeSelector" not in pod(body, "node")["spec"]
    assert list(rjobs(body)) == ["launcher", "node"]


def test_runtime_patch_container_env_merges_by_name() -> None:
    patch = _patch([_pod_patch("node", {"spec": {"containers": [{
        "name": "node", "env": [{"name": "FOO", "value": "patched"},
                                {"name": "NEW", "value": "added"}]}]}})])
    body = render(trainjob(env={"FOO": "orig", "BAR": "kept"}, patches=[patch]))
    before = [e["name"] for e in container(render(trainjob(env={"FOO": "o", "BAR": "k"})))["env"]]
    items = container(body)["env"]
    assert [e["name"] for e in items] == [*before, "NEW"]  # order kept, new appended
    env = env_of(body)
    assert env["FOO"] == "patched" and env["BAR"] == "kept" and env["NEW"] == "added"
    assert env["PET_NODE_RANK"] == INDEX_REF
    assert container(body)["image"] == IMAGE and container(body)["command"]


def test_later_patches_win() -> None:
    first = _patch([_pod_patch("node", {"spec": {"nodeSelector": {"a": "1", "b": "1"}}})])
    second = _patch([_pod_patch("node", {"spec": {"nodeSelector": {"b": "2"}}})])
    body = render(trainjob(patches=[first, second]))
    assert pod(body)["spec"]["nodeSelector"] == {"a": "1", "b": "2"}


def test_identity_labels_cannot_be_overridden() -> None:
    evil = {UID_LABEL: "someone-else", MANAGED_BY_LABEL: "kueue", JOB_ID_LABEL: "1",
            TRAINJOB_NAME_LABEL: "other", "keep": "me"}
    patch = _patch([_pod_patch("node", {"metadata": {"labels": evil}})],
                   metadata={"labels": evil})
    body = render(trainjob(patches=[patch]))
    for labels in (body["metadata"]["labels"], pod(body)["metadata"]["labels"]):
        assert labels[UID_LABEL] == UID and labels[MANAGED_BY_LABEL] == MANAGED_BY_VALUE
        assert labels[JOB_ID_LABEL] == "42" and labels[TRAINJOB_NAME_LABEL] == "train"
        assert labels["keep"] == "me"
    # The result is still recognised as this job's.
    assert backend_job_from_jobset(body) is not None
    assert backend_job_from_jobset(body).job_uid == UID  # type: ignore[union-attr]
    # Its namespace is reported: the engine keeps a JobSet only in the job's own.
    assert backend_job_from_jobset(body).namespace == body["metadata"]["namespace"]  # type: ignore[union-attr]


def test_malformed_patch_template_is_refused() -> None:
    bad = {"trainingRuntimeSpec": {"template": ["not", "a", "mapping"]}}
    with pytest.raises(BackendRejected, match=r"spec\.runtimePatches\[1\]"):
        render(trainjob(patches=[_patch(), bad]))


def test_render_does_not_modify_the_job() -> None:
    patch = _patch([_pod_patch("node", {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"nodeSelector": {"x": "y"}}})],
                   metadata={"labels": {"c": "d"}})
    job = trainjob(patches=[patch])
    before = copy.deepcopy(job.to_dict())
    render(job)
    render(job)
    assert job.to_dict() == before


def test_render_does_not_modify_the_job_s_patches() -> None:
    patch = _patch([_pod_patch("node", {"metadata": {"labels": {"a": "b"}}})])
    job = trainjob(patches=[patch])
    before = copy.deepcopy(job.to_dict())
    render(job)
    assert job.to_dict() == before


def test_patch_of_unknown_replicated_job_is_refused_not_crashing() -> None:
    patch = _patch([{"name": "worker", "replicas": 2}])
    with pytest.raises(BackendRejected):
        render(trainjob(patches=[patch]))


# --------------------------------------------------------------------------- merge

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5))
_keys = st.sampled_from(["a", "b", "env", "containers", "volumes", "name", "value", "x"])


def _json(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(children, max_size=3),
                     st.dictionaries(_keys, children, max_size=4))


_values = st.recursive(_scalars, _json, max_leaves=12)
_mappings = st.dictionaries(_keys, _values, max_size=4)


@settings(max_examples=50, deadline=None)
@given(base=_mappings)
def test_merge_empty_patch_is_identity(base: dict[str, Any]) -> None:
    frozen = copy.deepcopy(base)
    assert merge(base, {}) == base
    assert base == frozen


@settings(max_examples=50, deadline=None)
@given(base=_mappings, patch=_mappings)
def test_merge_does_not_modify_its_inputs(base: dict[str, Any], patch: dict[str, Any]) -> None:
    b, p = copy.deepcopy(base), copy.deepcopy(patch)
    out = merge(base, patch)
    assert base == b and patch == p
    # Every key of the patch is in the result; keys only in base are kept as they were.
    assert set(out) == set(base) | set(patch)
    for k in set(base) - set(patch):
        assert out[k] == base[k]


_item_names = st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=6)


@settings(max_examples=80, deadline=None)
@given(key=st.sampled_from(["env", "containers", "volumes", "replicatedJobs", "ports"]),
       base_names=_item_names, patch_names=_item_names, tag=st.integers())
def test_merge_named_lists(key: str, base_names: list[str], patch_names: list[str],
                           tag: int) -> None:
    base = {key: [{"name": n, "old": n} for n in base_names]}
    patch = {key: [{"name": n, "new": tag} for n in patch_names]}
    out = merge(base, patch)[key]
    new = [n for n in patch_names if n not in base_names]
    assert [i["name"] for i in out] == [*base_names, *new]
    for item in out:
        replaced = key == "env" and item["name"] in patch_names  # env items replace whole
        if item["name"] in base_names and not replaced:
            assert item["old"] == item["name"]
        if item["name"] in patch_names:
            assert item["new"] == tag
        if replaced:
            assert "old" not in item


def test_merge_replaces_unnamed_lists_and_scalars() -> None:
    base = {"tolerations": [{"key": "a"}], "args": ["x"], "n": 1, "m": {"k": 1}}
    out = merge(base, {"tolerations": [{"key": "b"}], "args": ["y"], "n": 2, "m": {"j": 2}})
    assert out == {"tolerations": [{"key": "b"}], "args": ["y"], "n": 2,
                   "m": {"k": 1, "j": 2}}


# --------------------------------------------------------------------------- placement etc.


def test_pinned_placement_is_required_node_affinity() -> None:
    placed = Placement(algorithm="tree_best_fit", requested=3,
                       hosts=("kwok-node-2", "kwok-node-1", "kwok-node-2"), units=(1, 1, 1))
    for runtime, names in (("torch-distributed", ["node"]),
                           ("mpi-distributed", ["launcher", "node"])):
        body = render(trainjob(runtime, nodes=3, command=["mpirun", "x"]), placement=placed)
        for rjob in names:
            terms = pod(body, rjob)["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert terms == [{"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In",
                "values": ["kwok-node-1", "kwok-node-2"]}]}]
    empty = Placement(algorithm="tree_best_fit", requested=2, reason="does not fit")
    assert "affinity" not in pod(render(trainjob(), placement=empty))["spec"]


def _terms(body: Mapping[str, Any], rjob: str = "node") -> Any:
    return pod(body, rjob)["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_exclude_and_constraint_are_required_node_affinity_with_the_pinned_hosts() -> None:
    """--exclude and --constraint hold whether or not the engine pinned hosts: the
    scheduler obeys them (k8s_adapter/options.py); one term, so every expression holds."""
    options = SchedulingOptions(exclude="kwok-node-[3-4]",
                                constraint="ib&topology.kubernetes.io/zone=a")
    body = render_jobset(request(trainjob(), options), OPTS)
    assert _terms(body) == [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "NotIn",
         "values": ["kwok-node-3", "kwok-node-4"]},
        {"key": "ib", "operator": "Exists"},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]
    placed = Placement(algorithm="tree_best_fit", requested=1, hosts=("kwok-node-1",),
                       units=(1,))
    pinned = render_jobset(request(trainjob(), options, placement=placed), OPTS)
    [term] = _terms(pinned)
    assert term["matchExpressions"][0] == {"key": "kubernetes.io/hostname", "operator": "In",
                                           "values": ["kwok-node-1"]}
    assert len(term["matchExpressions"]) == 4


@pytest.mark.parametrize(("given", "limit", "deadline", "expected"), [
    (None, None, None, None), (5, 5, None, 300), (None, None, 90, 90),
    (None, 2, 90, 90), (2, 2, 90, 120), (None, 3, None, 180)])
def test_time_limit_is_the_active_deadline(given: int | None, limit: int | None,
                                           deadline: int | None,
                                           expected: int | None) -> None:
    """--time the job gave (its annotation) is each Job's activeDeadlineSeconds, over
    the TrainJob's own deadline (the shape's precedence); --time the engine filled in
    from that deadline (rounded up to minutes) keeps the deadline's seconds."""
    annotations = ({ANN_SCHEDULING: json.dumps({"time_limit_minutes": given})}
                   if given is not None else None)
    job = trainjob(deadline=deadline, annotations=annotations)
    body = render_jobset(request(job, SchedulingOptions(time_limit_minutes=limit)), OPTS)
    for rj in body["spec"]["replicatedJobs"]:
        assert rj["template"]["spec"].get("activeDeadlineSeconds") == expected


def test_runtime_patches_cannot_undo_exclude_constraint_or_time() -> None:
    """A patch's own affinity replaces the list it names; the bridge's expressions are
    put back into every term, and a patch may shorten --time, never lengthen it."""
    patch = {"manager": "u", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {
            "activeDeadlineSeconds": 99999, "template": {"spec": {"affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In",
                                               "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In",
                                               "values": ["b"]}]}]}}}}}}}}]}}}}
    options = SchedulingOptions(exclude="kwok-node-1", time_limit_minutes=5)
    job = trainjob(patches=[patch], annotations={
        ANN_SCHEDULING: json.dumps({"exclude": "kwok-node-1", "time_limit_minutes": 5})})
    body = render_jobset(request(job, options), OPTS)
    terms = _terms(body)
    assert len(terms) == 2
    for term in terms:
        assert {"key": "kubernetes.io/hostname", "operator": "NotIn",
                "values": ["kwok-node-1"]} in term["matchExpressions"]
    assert rjobs(body)["node"]["template"]["spec"]["activeDeadlineSeconds"] == 300


@pytest.mark.parametrize(("options", "words"), [
    ({"exclude": ","}, "--exclude: names no hosts"),
    ({"constraint": "kubernetes.io/hostname=n1"}, "names hosts or node roles"),
    ({"constraint": "a..b/gpu"}, "not a DNS subdomain"),
])
def test_a_row_an_older_daemon_admitted_is_refused_when_rendered(options: dict[str, Any],
                                                                 words: str) -> None:
    with pytest.raises(BackendRejected, match=words):
        render_jobset(request(trainjob(), SchedulingOptions.model_validate(options)), OPTS)


def test_active_deadline_propagates_to_every_job() -> None:
    body = render(trainjob("mpi-distributed", nodes=2, command=["mpirun", "x"], deadline=600))
    for rj in body["spec"]["replicatedJobs"]:
        assert rj["template"]["spec"]["activeDeadlineSeconds"] == 600


def test_resources_per_node() -> None:
    body = render(trainjob(resources={"requests": {"cpu": 2, "memory": "4Gi",
                                                   "nvidia.com/gpu": 1},
                                      "limits": {"nvidia.com/gpu": "1"}}))
    assert container(body)["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"}}
    only = render(trainjob(resources={"requests": {"cpu": "500m"}}))
    assert container(only)["resources"] == {"requests": {"cpu": "500m"}}
    assert "resources" not in container(render(trainjob()))


# --------------------------------------------------------------------------- status


def _observed(status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    body = render(trainjob())
    body["metadata"].update(meta)
    if status is not None:
        body["status"] = status
    return body


def _cond(ctype: str, status: str = "True", **extra: Any) -> dict[str, Any]:
    return {"type": ctype, "status": status, **extra}


def _rjs(**counts: int) -> dict[str, Any]:
    return {"replicatedJobsStatus": [{"name": "node", **counts}]}


@pytest.mark.parametrize(("obj", "deleted", "state", "native"), [
    (_observed({"conditions": [_cond("Completed")]}), False, BackendState.COMPLETED,
     "Completed"),
    (_observed({"conditions": [_cond("Failed", reason="FailedJobs", message="node failed")]}),
     False, BackendState.FAILED, "Failed"),
    (_observed({"conditions": [_cond("Completed", "False"), _cond("Failed")]}), False,
     BackendState.FAILED, "Failed"),
    (_observed(_rjs(active=1)), True, BackendState.CANCELLED, "Deleted"),
    (_observed(_rjs(active=1), deletionTimestamp="2024-01-01T00:00:00Z"), False,
     BackendState.CANCELLED, "Deleted"),
    (_observed({"conditions": [_cond("Completed")]}), True, BackendState.COMPLETED,
     "Completed"),
    (_observed({"conditions": [_cond("Suspended")]}), False, BackendState.SUSPENDED,
     "Suspended"),
    (_observed({"conditions": [_cond("Suspended", "False")], **_rjs(active=2)}), False,
     BackendState.RUNNING, "Running"),
    (_observed(_rjs(ready=1)), False, BackendState.RUNNING, "Running"),
    (_observed(_rjs(active=0, ready=0, succeeded=0)), False, BackendState.PENDING, "Pending"),
    (_observed(), False, BackendState.PENDING, "Pending"),
])
def test_backend_job_from_jobset(obj: dict[str, Any], deleted: bool, state: BackendState,
                                 native: str) -> None:
    bj = backend_job_from_jobset(obj, deleted=deleted)
    assert bj is not None
    assert bj.state is state and bj.native_state == native
    assert bj.job_uid == UID and bj.backend_id == "team-a/train" and bj.queue == "team-a"
    if state is BackendState.COMPLETED:
        assert bj.exit_code == 0
    if state is BackendState.FAILED and obj["status"]["conditions"][-1].get("reason"):
        assert bj.reason == "FailedJobs: node failed"
    if state is BackendState.PENDING:
        assert bj.reason == "JobSetCreated"


def test_suspended_spec_is_suspended() -> None:
    body = render(trainjob(suspend=True))
    assert backend_job_from_jobset(body).state is BackendState.SUSPENDED  # type: ignore[union-attr]


def test_nodes_and_foreign_jobsets() -> None:
    bj = backend_job_from_jobset(_observed({"hpcBridgeNodes": ["kwok-node-1"], **_rjs(ready=1)}))
    assert bj is not None and bj.nodes == ("kwok-node-1",)
    foreign = _observed()
    del foreign["metadata"]["labels"][UID_LABEL]
    assert backend_job_from_jobset(foreign) is None
    assert backend_job_from_jobset({}) is None


def test_replicated_jobs_status_shape() -> None:
    obj = {"status": {"replicatedJobsStatus": [
        {"name": "launcher", "ready": 1, "active": 1},
        {"name": "node", "succeeded": "2", "failed": None, "suspended": 0, "extra": "x"}]}}
    assert replicated_jobs_status(obj) == [
        {"name": "launcher", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
         "suspended": 0},
        {"name": "node", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]
    assert replicated_jobs_status({}) == []
    assert replicated_jobs_status({"status": None}) == []


def test_split_id() -> None:
    assert split_id("team-a/train") == ("team-a", "train")
    for bad in ("train", "/train", "team-a/", ""):
        with pytest.raises(BackendRejected):
            split_id(bad)


def test_failure_message() -> None:
    pods: list[dict[str, Any]] = [{"metadata": {"name": "p0"}, "status": {"phase": "Running"}},
            {"metadata": {"name": "p1"}, "status": {"phase": "Failed", "containerStatuses": [
                {"name": "node", "state": {"terminated": {"exitCode": 3, "reason": "Error",
                                                          "message": "boom"}}}]}}]
    assert failure_message(pods) == "pod p1: container node Error, exit code 3: boom"
    assert failure_message(pods[:1]) is None


def test_a_container_restarted_in_its_pod_is_a_failure() -> None:
    """restartPolicy OnFailure: the pod stays Running; its last termination says why."""
    restarted = {"metadata": {"name": "p0"}, "status": {"phase": "Running", "containerStatuses": [
        {"name": "node", "restartCount": 1, "state": {"running": {}},
         "lastState": {"terminated": {"exitCode": 7, "reason": "Error"}}}]}}
    assert container_failure(restarted) == (7, "container node Error, exit code 7")
    clean = copy.deepcopy(restarted)
    clean["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] = 0
    assert container_failure(clean) is None
    done = copy.deepcopy(restarted)
    done["status"]["phase"] = "Succeeded"
    assert container_failure(done) is None


@pytest.mark.parametrize("key", ["volumeClaimPolicies", "failurePolicy", "managedBy"])
def test_a_patch_reaches_replicated_jobs_only(key: str) -> None:
    """Trainer's JobSetSpecPatch has replicatedJobs only: a patch that sets another
    JobSet field is refused naming it (a claim policy would bind any volume)."""
    patch = {"manager": "me", "trainingRuntimeSpec": {"template": {"spec": {
        key: [{"templates": [{"metadata": {"name": "d"}, "spec": {"volumeName": "pv"}}]}]}}}}
    with pytest.raises(BackendRejected, match=f"template.spec.{key}: not a field"):
        render(trainjob(patches=[patch]))
