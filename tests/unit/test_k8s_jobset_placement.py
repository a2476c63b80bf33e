"""k8s_adapter.jobset: placement, --exclude/--constraint and time limits as the JobSet's
node affinity and active deadline, and resources per node."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from bridge.backend import BackendRejected
from bridge.model import ANN_SCHEDULING
from bridge.placement import Placement
from bridge.scheduling import SchedulingOptions
from k8s_adapter.jobset import render_jobset
from tests.unit.builders import submit_request as request
from tests.unit.jobset_helpers import OPTS, container, pod, render, rjobs, trainjob

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


