"""What the TrainJob door's topology webhook adds to a TrainJob being created
(k8s_adapter/door_topology.py): only for the door's own TrainJobs that Kueue queues on
a back end whose pods it places, with a switch request, and never over the job's or
its runtime's own."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.model import MANAGED_BY, TrainJob
from bridge.runtimes import RuntimeCatalog
from bridge.service import JobService
from bridge.store import Store
from k8s_adapter.access import from_cr_door
from k8s_adapter.door_topology import DoorTopology
from k8s_adapter.frontdoor import FrontDoorSettings
from k8s_adapter.kube import KubeSettings
from k8s_adapter.kueue import managed
from k8s_adapter.kueue_topology import GROUP, PATCH_MANAGER, PREFERRED, REQUIRED
from tests.unit.builders import inventory
from tests.unit.fakes import FakeBackend

RACK = "topology.example/rack"
KUEUE = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {}}}


class KueuePods(FakeBackend):
    """A back end whose pods Kueue places (the Kubernetes one's two questions)."""

    topology_labels = (RACK, "kubernetes.io/hostname")

    def queue_places(self, job: TrainJob) -> bool:
        return from_cr_door(job) and managed(job)


def door(tmp_path: Path, ready: bool = True, **settings: Any) -> DoorTopology:
    store = Store.open(tmp_path / "s.sqlite")
    engine = Engine(store, {"kubernetes": KueuePods(inventory()),
                            "slurm": FakeBackend(inventory())},
                    RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    topology = DoorTopology("k8s", FrontDoorSettings(
        kube=KubeSettings(), backend="kubernetes", allowed_backends=("slurm",), **settings),
        lambda o: isinstance(o.get("spec"), dict) and o["spec"].get("managedBy") == MANAGED_BY,
        lambda: ready)
    topology._service = JobService(engine, EventFeed(store))
    return topology


def created(switches: Any = 1, nodes: int = 2, runtime: str = "torch-distributed",
            labels: Any = None, patches: Any = None, **annotations: str) -> dict[str, Any]:
    """A TrainJob as the webhook sees it: queued (label), 2 nodes, --switches."""
    meta: dict[str, Any] = {"name": "t", "namespace": "team-a",
                            "labels": {"kueue.x-k8s.io/queue-name": "q"} if labels is None
                            else labels, "annotations": dict(annotations)}
    if switches is not None:
        meta["annotations"]["hpc-bridge.io/scheduling"] = json.dumps({"switches": switches})
    spec: dict[str, Any] = {"managedBy": MANAGED_BY, "runtimeRef": {"name": runtime},
                            "trainer": {"numNodes": nodes, "image": "busybox",
                                        "command": ["torchrun", "t.py"]}}
    if patches is not None:
        spec["runtimePatches"] = patches
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": meta, "spec": spec}


def ours(patches: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The replicated jobs of the bridge's entry."""
    assert patches is not None
    [entry] = [p for p in patches if p["manager"] == PATCH_MANAGER]
    jobs: list[dict[str, Any]] = entry["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"]
    return jobs


def test_a_queued_torch_job_gets_a_required_rack_for_its_nodes(tmp_path: Path) -> None:
    obj = created()
    before = copy.deepcopy(obj)
    [node] = ours(door(tmp_path).for_webhook(obj))
    assert obj == before
    assert node["name"] == "node"
    assert node["template"]["spec"]["template"]["metadata"]["annotations"] == {REQUIRED: RACK}
    # Kueue's entry already there (its webhook ran first) is kept, before the bridge's.
    patches = door(tmp_path).for_webhook(created(switches=2, patches=[KUEUE]))
    assert patches is not None and patches[0] == KUEUE
    assert ours(patches)[0]["template"]["spec"]["template"]["metadata"]["annotations"] == {
        PREFERRED: RACK}


def test_an_mpi_jobs_launcher_and_workers_are_one_group(tmp_path: Path) -> None:
    jobs = ours(door(tmp_path).for_webhook(created(runtime="mpi-distributed")))
    assert [j["name"] for j in jobs] == ["launcher", "node"]
    for job in jobs:
        assert job["template"]["spec"]["template"]["metadata"]["annotations"] == {
            REQUIRED: RACK, GROUP: "hpc-bridge-ranks"}


@pytest.mark.parametrize(("obj", "why"), [
    (created(nodes=1), "one node is always under one switch"),
    (created(switches=None), "no switch request"),
    (created(labels={}), "Kueue does not queue it (yet: the apiserver calls again)"),
    (created(**{"hpc-bridge.io/backend": "slurm"}), "Slurm places its own nodes"),
    (created(**{"hpc-bridge.io/backend": "flux"}), "a back end the door does not allow"),
    (created(runtime="no-such"), "an unknown runtime: refused at admission"),
    (created(patches="x"), "patches that are no list: refused at admission"),
    (created(switches="x"), "bad options: refused at admission"),
    (dict(created(), spec="x"), "no spec"),
    ({**created(), "metadata": []}, "no metadata"),
])
def test_nothing_is_added(tmp_path: Path, obj: dict[str, Any], why: str) -> None:
    assert door(tmp_path).for_webhook(obj) is None, why


def test_nothing_for_another_controller_namespace_or_before_the_runtimes(
        tmp_path: Path) -> None:
    other = created()
    other["spec"]["managedBy"] = "trainer.kubeflow.org/trainjob-controller"
    assert door(tmp_path).for_webhook(other) is None
    assert door(tmp_path, namespaces=("team-b",)).for_webhook(created()) is None
    assert door(tmp_path, ready=False).for_webhook(created()) is None
    assert door(tmp_path, namespaces=("team-a",)).for_webhook(created()) is not None


def test_the_jobs_own_request_wins(tmp_path: Path) -> None:
    own = {"manager": "alice", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
            "metadata": {"annotations": {REQUIRED: "topology.example/block"}}}}}}]}}}}
    assert door(tmp_path).for_webhook(created(patches=[own])) is None
