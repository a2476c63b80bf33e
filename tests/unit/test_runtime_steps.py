"""A runtime with initializer steps, a volume claim and trainer resources (the shape of
Trainer v2.3's torchtune runtimes): resolved (bridge/runtimes.py, runtime_steps.py),
admitted (bridge/engine_admission.py) and laid out (k8s_adapter/runtime_template.py).
Golden comparison with Trainer's own JobSet: tests/unit/test_trainer_layout.py."""

from __future__ import annotations

import copy
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
