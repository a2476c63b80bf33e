"""The built-in runtimes read as Kubeflow Trainer's do, and their trainer container
fills what a TrainJob leaves out (bridge/runtimes.py).

:func:`sdk_problems` mirrors what the Kubeflow Python SDK (``kubeflow`` 0.5.0,
``TrainerClient.list_runtimes`` / ``get_runtime``) needs of a ClusterTrainingRuntime:
the framework label, ``spec.mlPolicy``, ``spec.template.spec.replicatedJobs`` each with
a pod spec, and a replicated job labelled ``trainjob-ancestor-step: trainer`` whose pod
template has a container ``node`` with an image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.model import ClusterTrainingRuntime, TrainJob, load_document
from bridge.runtimes import (
    ANCESTOR_LABEL,
    BUILTIN_IMAGES,
    FRAMEWORK_LABEL,
    Framework,
    RuntimeCatalog,
    builtin_runtimes,
    trainer_container,
)
from tests.unit.builders import bare_catalog, trainjob

CHART_RUNTIMES = Path(__file__).resolve().parents[2] / "charts/hpc-bridge/files/runtimes.yaml"


def sdk_problems(doc: dict[str, Any]) -> list[str]:
    """Why the Kubeflow SDK could not read ``doc`` as a runtime (empty: it can)."""
    problems = []
    if not doc.get("metadata", {}).get("labels", {}).get(FRAMEWORK_LABEL):
        problems.append(f"no label {FRAMEWORK_LABEL}")
    spec = doc.get("spec", {})
    if not isinstance(spec.get("mlPolicy"), dict):
        problems.append("no spec.mlPolicy")
    jobs = spec.get("template", {}).get("spec", {}).get("replicatedJobs")
    if not (isinstance(jobs, list) and jobs):
        return [*problems, "no spec.template.spec.replicatedJobs"]
    images = []
    for rjob in jobs:
        template = rjob.get("template", {})
        pod = template.get("spec", {}).get("template", {}).get("spec")
        if not (rjob.get("name") and isinstance(pod, dict)):
            problems.append(f"replicated job {rjob.get('name')!r}: no name or pod spec")
            continue
        if template.get("metadata", {}).get("labels", {}).get(ANCESTOR_LABEL) != "trainer":
            continue
        images += [c.get("image") for c in pod.get("containers", []) if c.get("name") == "node"]
    if not any(isinstance(i, str) and i for i in images):
        problems.append("no trainer container: a container 'node' with an image in a "
                        f"replicated job labelled {ANCESTOR_LABEL}=trainer")
    return problems


def chart_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(CHART_RUNTIMES.read_text()) if d]


# --------------------------------------------------------------------------- shape


def test_the_sdk_checker_refuses_what_the_sdk_refuses() -> None:
    doc = builtin_runtimes()[0].to_dict()
    assert sdk_problems(doc) == []
    assert any("trainer container" in p for p in sdk_problems(
        {**doc, "spec": {**doc["spec"], "template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "node", "image": "x"}]}}}}}]}}}}))  # no label
    assert "no spec.template.spec.replicatedJobs" in sdk_problems(
        {**doc, "spec": {"mlPolicy": {}, "template": {}}})


@pytest.mark.parametrize("doc", chart_documents(), ids=lambda d: d["metadata"]["name"])
def test_the_charts_runtimes_are_readable_by_the_sdk(doc: dict[str, Any]) -> None:
    assert sdk_problems(doc) == []
    # The model keeps the template whole (what the daemon loads from such a file).
    loaded = load_document(doc)
    assert isinstance(loaded, ClusterTrainingRuntime)
    assert loaded.spec.template == doc["spec"]["template"]


def test_every_built_in_runtime_has_its_image_from_the_one_table() -> None:
    runtimes = builtin_runtimes()
    assert [r.metadata.name for r in runtimes] == list(BUILTIN_IMAGES)
    for runtime in runtimes:
        assert sdk_problems(runtime.to_dict()) == [], runtime.metadata.name
        container = trainer_container(runtime.spec.template)
        assert container is not None
        assert container["image"] == BUILTIN_IMAGES[runtime.metadata.name]
        assert "command" not in container  # a job brings its own command, or is refused


@pytest.mark.parametrize("name", ["mpi-distributed", "deepspeed-distributed"])
def test_mpi_runtimes_have_a_launcher_that_is_the_trainer_and_nodes(name: str) -> None:
    runtime = next(r for r in builtin_runtimes() if r.metadata.name == name)
    jobs = runtime.spec.template["spec"]["replicatedJobs"]
    assert [j["name"] for j in jobs] == ["launcher", "node"]
    launcher, node = jobs
    assert launcher["replicas"] == 1
    assert launcher["template"]["metadata"]["labels"] == {ANCESTOR_LABEL: "trainer"}
    assert "metadata" not in node["template"]


@pytest.mark.parametrize("template", [
    {}, {"spec": []}, {"spec": {"replicatedJobs": {}}}, {"spec": {"replicatedJobs": [1]}},
    {"spec": {"replicatedJobs": [{"template": {"metadata": {"labels": [1]}}}]}},
    {"spec": {"replicatedJobs": [{"template": {
        "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
        "spec": {"template": {"spec": {"containers": [1, {"name": "other"}]}}}}}]}},
    {"spec": {"replicatedJobs": [{"template": {  # a node container, but not the trainer's
        "metadata": {"labels": {ANCESTOR_LABEL: "dataset-initializer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}}}]}},
])
def test_a_template_of_another_shape_has_no_trainer_container(template: Any) -> None:
    assert trainer_container(template) is None


# --------------------------------------------------------------------------- resolve


def runtime_with(name: str, container: dict[str, Any]) -> RuntimeCatalog:
    """The built-in catalogue plus torch runtime ``name`` whose trainer container is
    ``container`` (name ``node`` added)."""
    doc = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
           "metadata": {"name": name, "labels": {FRAMEWORK_LABEL: "torch"}},
           "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
               "replicatedJobs": [{"name": "node", "template": {
                   "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                   "spec": {"template": {"spec": {"containers": [
                       {"name": "node", **container}]}}}}}]}}}}
    runtime = load_document(doc)
    assert not isinstance(runtime, TrainJob)
    return RuntimeCatalog([runtime])


@pytest.mark.parametrize("name", list(BUILTIN_IMAGES))
def test_the_image_comes_from_the_runtime_unless_the_job_names_one(name: str) -> None:
    catalog = RuntimeCatalog()
    assert catalog.resolve(trainjob(name, command=["true"])).image == BUILTIN_IMAGES[name]
    assert catalog.resolve(trainjob(name, command=["true"], image="mine:1")).image == "mine:1"


def test_only_a_built_in_runtimes_image_yields_to_the_sites_default() -> None:
    """``builtin_image``: the image is this project's default (a back end's
    ``default_image`` goes first), not the job's nor an admin's runtime's."""
    catalog = RuntimeCatalog()
    plan = catalog.resolve(trainjob("torch-distributed", command=["true"]))
    assert plan.builtin_image and plan.extra["template"]["spec"]["replicatedJobs"]
    assert not catalog.resolve(trainjob("torch-distributed", command=["true"],
                                        image="mine:1")).builtin_image
    # An admin's runtime of the same name replaces the built-in one: its image stands.
    admins = runtime_with("torch-distributed", {"image": "site/torch:1"})
    plan = admins.resolve(trainjob("torch-distributed", command=["true"]))
    assert (plan.image, plan.builtin_image) == ("site/torch:1", False)


def test_a_runtime_without_trainer_container_gives_no_image() -> None:
    plan = bare_catalog().resolve(trainjob("torch-bare", command=["true"]))
    assert plan.image is None and plan.framework is Framework.TORCH


def test_the_command_comes_from_the_runtime_only_when_the_job_has_none() -> None:
    catalog = runtime_with("demo", {"image": "demo:1", "command": ["python", "demo.py"],
                                    "args": ["--epochs", "1"]})
    plan = catalog.resolve(trainjob("demo"))
    assert (plan.image, plan.command, plan.args) == (
        "demo:1", ("python", "demo.py"), ("--epochs", "1"))
    # The job's args replace the runtime's; the runtime's command stays.
    plan = catalog.resolve(trainjob("demo", args=["--epochs", "9"]))
    assert (plan.command, plan.args) == (("python", "demo.py"), ("--epochs", "9"))
    # A job with its own command gets neither the runtime's command nor its args.
    plan = catalog.resolve(trainjob("demo", command=["torchrun", "mine.py"], image="mine:1"))
    assert (plan.image, plan.command, plan.args) == ("mine:1", ("torchrun", "mine.py"), ())
    # A batch script is what runs: the runtime's command does not come with it.
    plan = catalog.resolve(trainjob("demo", script="#!/bin/sh\necho hi\n"))
    assert plan.batch_script == "#!/bin/sh\necho hi\n" and plan.command == ()
    assert plan.image == "demo:1"


@pytest.mark.parametrize("runtime", ["plain", "torch-distributed", "mpi-distributed"])
def test_no_command_anywhere_is_still_refused_naming_the_field(runtime: str) -> None:
    with pytest.raises(ValueError, match=r"spec\.trainer\.command: required.*"
                                         rf"runtime '{runtime}' gives none"):
        RuntimeCatalog().resolve(trainjob(runtime, image="x:1"))
    with pytest.raises(ValueError, match=r"spec\.trainer\.command: required"):
        runtime_with("imageonly", {"image": "x:1"}).resolve(trainjob("imageonly", args=["a"]))


@pytest.mark.parametrize(("container", "field"), [
    ({"image": 5}, "image"), ({"image": ""}, "image"),
    ({"image": "x", "command": "python t.py"}, "command"),
    ({"image": "x", "command": ["python"], "args": [1]}, "args"),
])
def test_a_malformed_trainer_container_is_refused_naming_the_runtime(
        container: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"spec\.runtimeRef\.name: runtime 'bad' .*"
                                         rf"containers\[node\]\.{field}: must be"):
        runtime_with("bad", container).resolve(trainjob("bad", command=["true"]))


def test_a_job_from_the_sdk_gets_the_runtimes_image() -> None:
    """The SDK's TrainJob names the runtime and a command, and no image."""
    job = trainjob("torch-distributed", nodes=2, command=["bash", "-c", "torchrun t.py"])
    plan = RuntimeCatalog().resolve(job)
    assert plan.image == BUILTIN_IMAGES["torch-distributed"]
    assert plan.command == ("bash", "-c", "torchrun t.py") and plan.num_nodes == 2
