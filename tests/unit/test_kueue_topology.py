"""The bridge's switch request handed to Kueue's Topology Aware Scheduling
(k8s_adapter/kueue_topology.py): which annotation at which level, and never over the
job's own request."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bridge.scheduling import SchedulingOptions
from k8s_adapter.kueue_topology import (
    GROUP,
    PATCH_MANAGER,
    PREFERRED,
    REQUIRED,
    asks_topology,
    entry_for,
    handed,
    leaf_level,
    pod_sets,
    request_for,
)

LEVELS = ("topology.example/block", "topology.example/rack", "kubernetes.io/hostname")
KUEUE = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {}}}


def trainjob(suspend: Any = True, patches: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"}, "suspend": suspend}
    spec["runtimePatches"] = [copy.deepcopy(KUEUE)] if patches is None else patches
    return {"metadata": {"name": "t", "namespace": "ns", "resourceVersion": "7"},
            "spec": spec}


@pytest.mark.parametrize(("labels", "level"), [
    (LEVELS, "topology.example/rack"),
    (LEVELS[:2], "topology.example/rack"),
    (("topology.kubernetes.io/zone", "kubernetes.io/hostname"), "topology.kubernetes.io/zone"),
    (("kubernetes.io/hostname",), None),
    ((), None),
])
def test_the_level_is_the_leaf_switches(labels: tuple[str, ...], level: str | None) -> None:
    assert leaf_level(labels) == level


@pytest.mark.parametrize(("options", "request_"), [
    ({}, None),
    ({"switches": 1}, (REQUIRED, "topology.example/rack")),
    ({"switches": 1, "switches_wait_minutes": 0}, (REQUIRED, "topology.example/rack")),
    ({"switches": 1, "switches_wait_minutes": 5}, (PREFERRED, "topology.example/rack")),
    ({"switches": 3}, (PREFERRED, "topology.example/rack")),
])
def test_a_switch_request_becomes_required_or_preferred(
        options: dict[str, Any], request_: tuple[str, str] | None) -> None:
    assert request_for(SchedulingOptions(**options), LEVELS) == request_
    assert request_for(SchedulingOptions(**options), ("kubernetes.io/hostname",)) is None


def test_the_entry_annotates_the_trainers_pods_after_the_others() -> None:
    user = {"manager": "alice", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
            "metadata": {"labels": {"a": "b"}}}}}}]}}}}
    obj = trainjob(patches=[copy.deepcopy(KUEUE), user])
    before = copy.deepcopy(obj)
    patches = entry_for(obj, (REQUIRED, "rack"))
    assert obj == before  # not changed in place
    assert patches == [KUEUE, user, {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
            "template": {"metadata": {"annotations": {REQUIRED: "rack"}}}}}}]}}}}]
    assert asks_topology(patches)


OWN = {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {}}}
ASKS = {"manager": "alice", "trainingRuntimeSpec": {"template": {"spec": {
    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": {
        "annotations": {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}}}}}}]}}}}


@pytest.mark.parametrize(("obj", "why"), [
    (trainjob(patches="junk"), "patches that are no list: admission refuses them"),
    (trainjob(patches=[KUEUE, OWN]), "added before"),
    (trainjob(patches=[KUEUE, ASKS]), "the job asks for a topology itself"),
    (trainjob(patches=[ASKS]), "... also before Kueue's webhook ran"),
])
def test_nothing_is_added_when_there_or_asked(obj: dict[str, Any], why: str) -> None:
    assert entry_for(obj, (REQUIRED, "rack")) is None, why


def test_nothing_without_a_request_or_when_the_runtime_asks() -> None:
    assert entry_for(trainjob(), None) is None
    assert entry_for(trainjob(), (PREFERRED, "rack"), runtime_asks=True) is None
    assert entry_for(trainjob(), (PREFERRED, "rack")) is not None
    # At creation (the webhook) Kueue's entry may not be there yet.
    assert entry_for(trainjob(suspend=None, patches=[]), (REQUIRED, "r")) is not None


def test_the_pod_sets_asked_for() -> None:
    assert pod_sets("torch", 1) == () and pod_sets("mpi", 1) == ()
    assert pod_sets("torch", 2) == ("node",) and pod_sets("jax", 4) == ("node",)
    assert pod_sets("mpi", 2) == ("launcher", "node")
    assert entry_for(trainjob(), (REQUIRED, "r"), jobs=()) is None
    [entry] = [p for p in entry_for(trainjob(), (REQUIRED, "r"), jobs=("launcher", "node"))
               or [] if p["manager"] == PATCH_MANAGER]
    jobs = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [j["template"]["spec"]["template"]["metadata"]["annotations"] for j in jobs] == [
        {REQUIRED: "r", GROUP: "hpc-bridge-ranks"}] * 2


def test_handed_means_the_bridges_entry_asks_kueue() -> None:
    patches = entry_for(trainjob(), (REQUIRED, "rack"))
    assert handed(patches)
    assert not handed([KUEUE, ASKS])  # the job's own request is not the bridge's
    assert not handed([KUEUE, OWN])   # an entry of that name that asks nothing
    assert not handed(None) and not handed("x")


@pytest.mark.parametrize("patches", [None, "x", [1, {"trainingRuntimeSpec": 3}],
                                     [{"trainingRuntimeSpec": {"template": {"spec": {
                                         "replicatedJobs": [None, {"template": []}]}}}}]])
def test_malformed_patches_ask_for_nothing(patches: Any) -> None:
    assert not asks_topology(patches)
