"""k8s_adapter.jobset: TrainJob → JobSet as Kubeflow Trainer lays it out.

Requests are built the way the engine builds them (``bridge/engine.py`` ``_request``):
``load_trainjob`` + ``RuntimeCatalog().resolve``. Pod names are checked against
``mpi_launch.allocation.jobset_allocation`` / ``from_jobset_env`` and hostfiles against
``mpi_launch.hostfile.render_hostfile``, so the JobSet and ``mpi-launch`` cannot drift.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bridge.backend import BackendRejected, SubmitRequest
from bridge.model import load_document
from bridge.runtimes import BUILTIN_IMAGES, RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from k8s_adapter.jobset import (
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
from mpi_launch.allocation import Host, from_jobset_env, jobset_allocation
from mpi_launch.hostfile import render_hostfile
from tests.unit import builders
from tests.unit.builders import IMAGE, UID
from tests.unit.builders import submit_request as request
from tests.unit.jobset_helpers import (
    DNS1035,
    HOSTILE,
    INDEX_REF,
    MAX_NAME,
    OPTS,
    SCRIPT,
    UID2,
    container,
    env_of,
    pod,
    render,
    rjobs,
    trainjob,
)

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


