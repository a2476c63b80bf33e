"""The Kubernetes back end checks at admission that a job's JobSet can be laid out
(:class:`bridge.backend.Validating`): a job with no image, or a runtime patch of the
wrong shape, is refused with a readable message (400), never an exception of another
kind (a 500, or a job that fails only at submission)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.backend import BackendRejected, Owner, SubmitRequest, Validating
from bridge.model import ensure_identity, load_trainjob
from bridge.scheduling import scheduling_of
from k8s_adapter.backend import create as create_k8s
from tests.unit.builders import bare_catalog

ALICE = Owner(uid=1001, gid=1001, user="alice")


def request(patch: Any | None = None, image: str | None = "img:1",
            runtime: str = "torch-distributed") -> SubmitRequest:
    trainer: dict[str, Any] = {"numNodes": 2, "command": ["true"]}
    if image:
        trainer["image"] = image
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime}, "trainer": trainer}
    if patch is not None:
        spec["runtimePatches"] = [patch]
    job = ensure_identity(load_trainjob({"apiVersion": "trainer.kubeflow.org/v1alpha1",
                                         "kind": "TrainJob", "metadata": {"name": "x"},
                                         "spec": spec}))
    return SubmitRequest(job_uid=job.metadata.uid or "", job_id=0, job=job,
                         plan=bare_catalog().resolve(job), options=scheduling_of(job),
                         owner=ALICE)


def node_template(template: Any) -> dict[str, Any]:
    return {"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": template}]}}}}


@pytest.mark.parametrize("patch", [
    node_template([]), node_template(None), node_template(1), node_template("x"),
    {"trainingRuntimeSpec": [1]}, {"trainingRuntimeSpec": "x"}, {"trainingRuntimeSpec": 1},
])
def test_a_patch_of_the_wrong_shape_is_refused_at_admission(patch: Any) -> None:
    backend = create_k8s("kubernetes", {"kubeconfig": "/nonexistent"})
    assert isinstance(backend, Validating)
    with pytest.raises(BackendRejected, match=r"runtimePatches|cannot be laid out"):
        backend.validate(request(patch))


def test_no_image_and_no_default_is_refused_at_admission() -> None:
    backend = create_k8s("kubernetes", {"kubeconfig": "/nonexistent"})
    with pytest.raises(BackendRejected, match=r"spec\.trainer\.image: required"):
        backend.validate(request(image=None, runtime="torch-bare"))  # nor the runtime
    backend.validate(request())  # a good job passes
    backend.validate(request(image=None))  # the built-in runtime gives the image
    with_default = create_k8s("kubernetes", {"kubeconfig": "/nonexistent",
                                             "default_image": "busybox:1.36"})
    with_default.validate(request(image=None, runtime="torch-bare"))


def test_a_stopiteration_out_of_the_layout_is_a_refusal_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``next()`` without a default deep in the layout (the data cache's container, once)
    must not leave validate: out of a coroutine it becomes a RuntimeError (a 500)."""
    def layout(*_: Any) -> dict[str, Any]:
        raise StopIteration
    monkeypatch.setattr("k8s_adapter.backend.render_jobset", layout)
    backend = create_k8s("kubernetes", {"kubeconfig": "/nonexistent"})
    with pytest.raises(BackendRejected, match="cannot be laid out: StopIteration"):
        backend.validate(request())
