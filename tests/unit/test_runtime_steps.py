"""A runtime with initializer steps, a volume claim and trainer resources (the shape of
Trainer v2.3's torchtune runtimes): resolved (bridge/runtimes.py, runtime_steps.py),
admitted (bridge/engine_admission.py) and laid out (k8s_adapter/runtime_template.py).
Golden comparison with Trainer's own JobSet: tests/unit/test_trainer_layout.py."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import BackendRejected
from bridge.engine import Engine, EngineSettings
from bridge.model import ValidationError, load_document, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.shape import resolve_shape
from bridge.store import Store
from k8s_adapter.jobset import JobSetOptions, render_jobset
from tests.unit.builders import ALICE, API_VERSION, inventory, submit_request, trainjob_doc
from tests.unit.fakes import FakeBackend

NAME = "torchtune-llama3.2-1b"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
MOUNT = {"name": "initializer", "mountPath": "/workspace"}


def step(name: str, uri: str) -> dict[str, Any]:
    return {"name": name, "template": {
        "metadata": {"labels": {ANCESTOR: name}},
        "spec": {"template": {"spec": {"containers": [{
            "name": name, "image": f"example.org/{name}",
            "env": [{"name": "STORAGE_URI", "value": uri}], "volumeMounts": [MOUNT]}]}}}}}


def runtime_doc() -> dict[str, Any]:
    node = {"name": "node", "dependsOn": [{"name": "dataset-initializer", "status": "Complete"},
                                          {"name": "model-initializer", "status": "Complete"}],
            "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {
                "spec": {"containers": [{
                    "name": "node", "image": "example.org/torchtune-trainer",
                    "command": ["tune", "run", "full_finetune_distributed", "--config",
                                "llama3_2/1B_full", "output_dir=/workspace/output",
                                "checkpointer.checkpoint_dir=/workspace/model"],
                    "resources": {"limits": {"nvidia.com/gpu": 2}},
                    "volumeMounts": [MOUNT]}]}}}}}
    return {"apiVersion": API_VERSION, "kind": "ClusterTrainingRuntime",
            "metadata": {"name": NAME, "labels": {"trainer.kubeflow.org/framework": "torchtune"}},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
                "volumeClaimPolicies": [{"templates": [{
                    "metadata": {"name": "initializer"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "20Gi"}}}}]}],
                "replicatedJobs": [step("dataset-initializer", "hf://tatsu-lab/alpaca"),
                                   step("model-initializer", "hf://meta-llama/Llama-3.2-1B"),
                                   node]}}}}


def catalog(doc: dict[str, Any] | None = None) -> RuntimeCatalog:
    runtime = load_document(doc or runtime_doc())
    assert not isinstance(runtime, type(load_trainjob(trainjob_doc())))
    return RuntimeCatalog([runtime])  # type: ignore[list-item]


INITIALIZER = {"dataset": {"storageUri": "hf://tatsu-lab/alpaca/data",
                           "env": [{"name": "SPLIT", "value": "train"}]},
               "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct",
                         "secretRef": {"name": "hf-token"}}}


def tune_job(initializer: Any = None, **fields: Any) -> dict[str, Any]:
    doc = trainjob_doc(NAME, command=["tune", "run"], args=["dtype=bf16", "epochs=1"], **fields)
    doc["spec"]["initializer"] = copy.deepcopy(INITIALIZER if initializer is None
                                               else initializer)
    return doc


def test_a_torchtune_job_resolves_as_trainer_completes_it() -> None:
    plan = catalog().resolve(load_trainjob(tune_job()))
    assert plan.initializers == ("dataset-initializer", "model-initializer")
    assert plan.data_cache is None  # the runtime's dataset step takes spec.initializer
    assert plan.command == ("tune", "run", "full_finetune_distributed", "--config",
                            "llama3_2/1B_full", "output_dir=/workspace/output",
                            "checkpointer.checkpoint_dir=/workspace/model")
    assert plan.args == ("dtype=bf16", "epochs=1")
    assert plan.resources == {"limits": {"nvidia.com/gpu": 2}}
    shape = resolve_shape(load_trainjob(tune_job()), plan, SchedulingOptions())
    assert shape.gpus_per_node == 2  # the runtime's, as Trainer takes them


@pytest.mark.parametrize(("initializer", "field"), [
    ({"dataset": {"storageUri": "not a uri"}}, "spec.initializer.dataset.storageUri"),
    ({"model": {"secretRef": "hf-token"}}, "spec.initializer.model.secretRef"),
    ({"model": {"env": [{"name": "A", "valueFrom": {}}]}}, "spec.initializer.model.env"),
    ({"dataset": {"storageUri": "hf://x", "extra": 1}}, "spec.initializer.dataset.extra"),
    ({"cache": {}}, "spec.initializer.cache"),
])
def test_an_initializer_entry_a_step_would_ignore_is_refused(initializer: Any,
                                                             field: str) -> None:
    with pytest.raises(ValidationError) as err:
        catalog().resolve(load_trainjob(tune_job(initializer)))
    assert err.value.errors[0][0] == field


def test_a_model_entry_without_a_model_step_is_refused() -> None:
    doc = runtime_doc()
    jobs = doc["spec"]["template"]["spec"]["replicatedJobs"]
    del jobs[1]
    jobs[1]["dependsOn"] = jobs[1]["dependsOn"][:1]
    with pytest.raises(ValidationError) as err:
        catalog(doc).resolve(load_trainjob(tune_job()))
    assert err.value.errors[0][0] == "spec.initializer.model"


def test_trainers_webhook_errors_are_a_400_naming_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        catalog().resolve(load_trainjob(tune_job(nodes=2)))
    assert err.value.errors[0][0] == "spec.trainer.numNodes"


def test_a_back_end_without_pods_refuses_a_runtime_with_steps(tmp_path: Path) -> None:
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": FakeBackend(inventory())},
               catalog(), EngineSettings(default_backend="slurm"))
    with pytest.raises(ValidationError) as err:
        e.admit(load_trainjob(tune_job()), ALICE)
    assert "spec.runtimeRef.name" in str(err.value) and "back end 'slurm'" in str(err.value)
    assert "dataset-initializer, model-initializer" in str(err.value)
    assert e.store.list_jobs() == []


def rjobs(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rj["name"]: rj for rj in body["spec"]["replicatedJobs"]}


def container(rj: dict[str, Any], name: str) -> dict[str, Any]:
    pod = rj["template"]["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == name)
    return found


def test_the_jobset_has_the_steps_the_claim_and_the_completed_command() -> None:
    req = submit_request(load_trainjob(tune_job()), catalog=catalog())
    body = render_jobset(req, JobSetOptions())
    assert [rj["name"] for rj in body["spec"]["replicatedJobs"]] == [
        "dataset-initializer", "model-initializer", "node"]
    assert body["spec"]["volumeClaimPolicies"][0]["templates"][0]["metadata"]["name"] == (
        "initializer")
    jobs = rjobs(body)
    dataset = container(jobs["dataset-initializer"], "dataset-initializer")
    assert {e["name"]: e["value"] for e in dataset["env"]} == {
        "STORAGE_URI": "hf://tatsu-lab/alpaca/data", "SPLIT": "train"}
    model = container(jobs["model-initializer"], "model-initializer")
    assert model["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert jobs["dataset-initializer"]["replicas"] == 1
    node = jobs["node"]
    assert node["dependsOn"] == [{"name": "dataset-initializer", "status": "Complete"},
                                 {"name": "model-initializer", "status": "Complete"}]
    trainer = container(node, "node")
    assert trainer["command"][:3] == ["tune", "run",
                                      "--rdzv_endpoint=train-node-0-0.train:29500"]
    assert trainer["args"] == ["dtype=bf16", "epochs=1"]
    assert MOUNT in trainer["volumeMounts"]
    assert trainer["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["PET_NPROC_PER_NODE"] == "auto" and "PET_MASTER_ADDR" not in env
    # The bridge's labels on every pod, the steps' included.
    for rj in jobs.values():
        labels = rj["template"]["spec"]["template"]["metadata"]["labels"]
        assert labels["hpc-bridge.io/job-uid"] == req.job_uid


def test_a_template_replicated_job_the_bridge_does_not_know_is_refused() -> None:
    doc = runtime_doc()
    doc["spec"]["template"]["spec"]["replicatedJobs"].insert(0, {
        "name": "sidecar-job", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "x", "image": "busybox"}]}}}}})
    req = submit_request(load_trainjob(tune_job()), catalog=catalog(doc))
    with pytest.raises(BackendRejected, match="'sidecar-job'"):
        render_jobset(req, JobSetOptions())


def test_the_jobs_own_resources_win_over_the_runtimes() -> None:
    job = load_trainjob(tune_job(resources={"limits": {"nvidia.com/gpu": 1}}))
    req = submit_request(job, catalog=catalog())
    body = render_jobset(req, JobSetOptions())
    trainer = container(rjobs(body)["node"], "node")
    assert trainer["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert trainer["command"][2:5] == ["full_finetune_single_device", "--config",
                                       "llama3_2/1B_full_single_device"]


def render(doc: dict[str, Any], runtime: dict[str, Any] | None = None,
           options: JobSetOptions | None = None) -> dict[str, Any]:
    req = submit_request(load_trainjob(doc), catalog=catalog(runtime))
    return render_jobset(req, options or JobSetOptions())


def test_a_data_cache_beside_a_model_step_is_a_valid_order() -> None:
    """The steps first, then the cache, then the trainer, waiting for both (JobSet
    refuses a first replicated job with dependsOn, or one naming a later job)."""
    doc = runtime_doc()
    jobs = doc["spec"]["template"]["spec"]["replicatedJobs"]
    del jobs[0]  # no dataset step: spec.initializer.dataset is the data cache
    jobs[1]["dependsOn"] = [{"name": "model-initializer", "status": "Complete"}]
    body = render(tune_job({"dataset": {"storageUri": "/data/set"},
                            "model": {"storageUri": "hf://m/n"}}), doc)
    order = [rj["name"] for rj in body["spec"]["replicatedJobs"]]
    assert order == ["model-initializer", "data-cache", "node"]
    depends = {rj["name"]: [d["name"] for d in rj.get("dependsOn") or []]
               for rj in body["spec"]["replicatedJobs"]}
    assert depends == {"model-initializer": [], "data-cache": [],
                       "node": ["data-cache", "model-initializer"]}
    assert_valid_depends_on(body)


def assert_valid_depends_on(body: dict[str, Any]) -> None:
    """JobSet's webhook rules (jobset_webhook.go): the first has none; each names an
    earlier replicated job."""
    seen: list[str] = []
    for rj in body["spec"]["replicatedJobs"]:
        for d in rj.get("dependsOn") or []:
            assert d["name"] in seen, (rj["name"], d["name"], seen)
        seen.append(rj["name"])


def mpi_runtime(nodes: int = 1) -> dict[str, Any]:
    """Trainer's own MPI runtimes' shape: node first, the launcher waiting for it."""
    def rjob(name: str, ancestor: str | None, **container: Any) -> dict[str, Any]:
        meta = {"labels": {ANCESTOR: ancestor}} if ancestor else {}
        return {"name": name, "template": {"metadata": meta, "spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "example.org/mpi", **container}]}}}}}
    launcher = rjob("launcher", "trainer")
    launcher["dependsOn"] = [{"name": "node", "status": "Ready"}]
    node = rjob("node", None, command=["/usr/sbin/sshd"], args=["-De", "-f", "/etc/x"])
    return {"apiVersion": API_VERSION, "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "mpi-upstream"},
            "spec": {"mlPolicy": {"numNodes": nodes, "mpi": {
                "mpiImplementation": "OpenMPI", "runLauncherAsNode": True,
                "sshAuthMountPath": "/home/mpiuser/.ssh"}},
                "template": {"spec": {"replicatedJobs": [node, launcher]}}}}


@pytest.mark.parametrize("nodes", [1, 3])
def test_an_mpi_template_keeps_its_order_and_its_workers_command(nodes: int) -> None:
    doc = trainjob_doc("mpi-upstream", nodes=nodes, command=["mpirun", "python", "x.py"],
                       image="img")
    body = render(doc, mpi_runtime(nodes))
    assert_valid_depends_on(body)
    jobs = rjobs(body)
    if nodes == 1:  # no node job to wait for
        assert list(jobs) == ["launcher"] and "dependsOn" not in jobs["launcher"]
        return
    assert list(jobs) == ["node", "launcher"]
    assert jobs["launcher"]["dependsOn"] == [{"name": "node", "status": "Ready"}]
    worker = container(jobs["node"], "node")
    assert (worker["command"], worker["args"]) == (["/usr/sbin/sshd"], ["-De", "-f", "/etc/x"])
    assert container(jobs["launcher"], "node")["command"] == ["mpirun", "python", "x.py"]
    assert {"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"} in worker["volumeMounts"]


@pytest.mark.parametrize(("resources", "recipe", "rdzv"), [
    (None, "full_finetune_single_device", False),  # auto on no GPU, no CPU: 1 process
    ({"limits": {"cpu": "4"}}, "full_finetune_distributed", True),  # 4 processes
])
def test_a_cpu_only_torchtune_job_counts_its_cpus_as_trainer(
        resources: dict[str, Any] | None, recipe: str, rdzv: bool) -> None:
    doc = runtime_doc()
    node = doc["spec"]["template"]["spec"]["replicatedJobs"][2]
    del node["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    plan = catalog(doc).resolve(load_trainjob(tune_job(resources=resources)))
    assert plan.command[2] == recipe
    assert plan.extra["torchtune_rendezvous"] is rdzv


def test_the_shape_counts_the_runtimes_gpus_beside_the_jobs_cpus() -> None:
    job = load_trainjob(tune_job(resources={"requests": {"cpu": "4"}}))
    plan = catalog().resolve(job)
    shape = resolve_shape(job, plan, SchedulingOptions())
    assert (shape.gpus_per_node, shape.cpus_per_node) == (2, 4)


@pytest.mark.parametrize(("env", "name"), [
    ([{"name": "STORAGE_URI", "value": "hf://other"}], "STORAGE_URI"),
])
def test_an_initializer_may_not_override_what_its_step_sets(env: list[Any], name: str
                                                            ) -> None:
    doc = runtime_doc()
    step0 = doc["spec"]["template"]["spec"]["replicatedJobs"][0]
    step0["template"]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "HF_ENDPOINT", "value": "https://mirror.example"})
    for bad in (env, [{"name": "HF_ENDPOINT", "value": "https://attacker.example"}]):
        with pytest.raises(ValidationError) as err:
            catalog(doc).resolve(load_trainjob(tune_job({"dataset": {"storageUri": "hf://a",
                                                                     "env": bad}})))
        assert err.value.errors[0][0] == "spec.initializer.dataset.env[0]"
    assert name == "STORAGE_URI"


@pytest.mark.parametrize("path", ["relative/.ssh", "/", "/a/../etc", "///"])
def test_a_bad_ssh_auth_mount_path_is_refused_naming_it(path: str) -> None:
    doc = mpi_runtime(2)
    doc["spec"]["mlPolicy"]["mpi"]["sshAuthMountPath"] = path
    with pytest.raises(ValidationError, match="sshAuthMountPath"):
        catalog(doc).resolve(load_trainjob(trainjob_doc("mpi-upstream", command=["x"])))


@pytest.mark.parametrize(("policy", "says"), [
    ({"templates": [{"metadata": {"name": "initializer"},
                     "spec": {"volumeName": "someone-elses"}}]}, "volumeName"),
    ({"templates": [{"metadata": {"name": "initializer"},
                     "spec": {"selector": {"matchLabels": {"a": "b"}}}}]}, "selector"),
    ({"templates": [{"metadata": {"name": "initializer"},
                     "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "x"}}}]},
     "dataSource"),
    ({"retentionPolicy": {"whenDeleted": "Retain"},
      "templates": [{"metadata": {"name": "initializer"}, "spec": {}}]}, "Delete"),
])
def test_a_claim_template_reaching_beyond_a_scratch_volume_is_refused(
        policy: dict[str, Any], says: str) -> None:
    doc = runtime_doc()
    doc["spec"]["template"]["spec"]["volumeClaimPolicies"] = [policy]
    with pytest.raises(BackendRejected, match=says):
        render(tune_job(), doc)


@pytest.mark.parametrize("pod", ["ab", {"containers": 5}, {"containers": ["x"]},
                                 {"volumes": [{"hostPath": {}}]}])
def test_a_malformed_template_pod_is_a_refusal_not_a_crash(pod: Any) -> None:
    doc = runtime_doc()
    doc["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"] = pod
    with pytest.raises(BackendRejected):
        render(tune_job(), doc)


def test_a_name_too_long_for_the_steps_pods_is_refused() -> None:
    with pytest.raises(BackendRejected, match=r"metadata\.name"):
        render(tune_job(name="n" * 40))
    render(tune_job(name="n" * 33))


def test_a_runtime_with_two_jobs_of_one_step_is_refused() -> None:
    doc = runtime_doc()
    jobs = doc["spec"]["template"]["spec"]["replicatedJobs"]
    jobs.insert(1, {**copy.deepcopy(jobs[0]), "name": "dataset-initializer-2"})
    with pytest.raises(BackendRejected, match="more than one dataset-initializer"):
        render(tune_job(), doc)


def test_the_steps_pods_get_the_back_ends_account_and_scheduler() -> None:
    body = render(tune_job(), options=JobSetOptions(service_account="runner",
                                                    scheduler_name="gang"))
    for rj in body["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]["spec"]
        assert (pod["serviceAccountName"], pod["schedulerName"]) == ("runner", "gang")


def test_a_job_stored_before_steps_were_read_runs_without_them() -> None:
    """A plan stored by an older bridge lists no steps: its template's steps are not
    added (the job runs as it was admitted)."""
    req = submit_request(load_trainjob(tune_job({})), catalog=catalog())
    old = dataclasses.replace(req.plan, initializers=())
    body = render_jobset(dataclasses.replace(req, plan=old), JobSetOptions())
    assert [rj["name"] for rj in body["spec"]["replicatedJobs"]] == ["node"]


def test_an_absurd_gpu_quantity_is_a_400_not_a_crash() -> None:
    job = load_trainjob(tune_job(resources={"limits": {"nvidia.com/gpu": "1e400"}}))
    with pytest.raises(ValidationError):
        resolve_shape(job, catalog().resolve(job), SchedulingOptions())


def test_an_ancestor_label_that_is_not_a_string_is_no_step() -> None:
    doc = runtime_doc()
    doc["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["metadata"]["labels"][
        ANCESTOR] = ["dataset-initializer"]
    plan = catalog(doc).resolve(load_trainjob(tune_job({"model": {"storageUri": "hf://m"}})))
    assert plan.initializers == ("model-initializer",)
