"""pool_adapter.pinning and nodemap: the JobSet the pool makes, the patch that pins it,
and how Slurm node names become Kubernetes ones."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pool_adapter import pinning
from pool_adapter.nodemap import NodeMap, UnmappedNode


class _Owner:
    uid = 1001


class _Options:
    time_limit_minutes = 10


class _Request:
    owner = _Owner()
    options = _Options()


def body() -> dict[str, Any]:
    def rjob(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "template": {"spec": {"template": {"spec": spec}}}}
    return {"metadata": {"name": "job", "namespace": "team-a", "resourceVersion": "7"},
            "spec": {"replicatedJobs": [
                rjob("node", {"nodeSelector": {"gpu": "a100"},
                              "tolerations": [{"key": "mine", "operator": "Exists"}]}),
                rjob("launcher", {})]}}


def test_the_pools_jobset_is_suspended_tolerates_the_pool_and_spreads_its_nodes() -> None:
    b = body()
    pinning.amend(b, _Request(), pool="pool", taint_key="t/pool",  # type: ignore[arg-type]
                  pool_label="t/pool")
    assert b["spec"]["suspend"] is True
    assert b["metadata"]["annotations"] == {pinning.ANN_POOL: "pool",
                                            pinning.ANN_OWNER_UID: "1001"}
    node, launcher = (spec for _, spec in pinning.pod_specs(b))
    assert node["tolerations"] == [{"key": "mine", "operator": "Exists"},
                                   {"key": "t/pool", "operator": "Exists",
                                    "effect": "NoSchedule"}]
    assert node["nodeSelector"] == {"gpu": "a100", "t/pool": "true"}
    assert launcher["nodeSelector"] == {"t/pool": "true"}
    (term,) = node["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {
        "jobset.sigs.k8s.io/jobset-name": "job", "jobset.sigs.k8s.io/replicatedjob-name": "node"}
    assert "affinity" not in launcher


def test_the_deadline_of_the_time_limit_is_the_holders_a_shorter_one_stays() -> None:
    b = body()
    node, launcher = (rj["template"]["spec"] for rj in b["spec"]["replicatedJobs"])
    node["activeDeadlineSeconds"], launcher["activeDeadlineSeconds"] = 600, 300
    pinning.amend(b, _Request(), pool="pool", taint_key="t", pool_label=None)  # type: ignore[arg-type]
    assert "activeDeadlineSeconds" not in node and launcher["activeDeadlineSeconds"] == 300


def test_pinning_replaces_an_earlier_allocation_and_keeps_other_selectors() -> None:
    b = body()
    b["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"][
        "slurm.hpc-bridge.io/job-41"] = "true"
    before = copy.deepcopy(b)
    ops = pinning.pin_patch(b, "42", suspend=False)
    assert b == before  # the watch's object is not touched
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    # the value is the namespace: what the pool's admission policy checks a pod against
    assert ops[1]["value"] == {"gpu": "a100", "slurm.hpc-bridge.io/job-42": "team-a"}
    assert ops[2]["value"] == {"slurm.hpc-bridge.io/job-42": "team-a"}
    assert ops[-1] == {"op": "add", "path": "/spec/suspend", "value": False}
    assert pinning.pinned_to(b) == "41"
    unpin = pinning.pin_patch(b, None, suspend=True)
    assert unpin[1]["value"] == {"gpu": "a100"} and unpin[-1]["value"] is True


def test_an_allocation_label_takes_only_a_slurm_job_id() -> None:
    assert pinning.allocation_label("42") == "slurm.hpc-bridge.io/job-42"
    with pytest.raises(ValueError):
        pinning.allocation_label("42;x")


def test_node_names_map_by_the_admins_rule() -> None:
    assert NodeMap.parse("same").to_kubernetes(["node1"]) == ["node1"]
    table = NodeMap.parse("table", {"node1": "k-1", "node2": "k-2"})
    assert table.to_kubernetes(["node2", "node1"]) == ["k-2", "k-1"]
    with pytest.raises(UnmappedNode, match="node3"):
        table.to_kubernetes(["node1", "node3"])
    nodes = [{"metadata": {"name": "k-7", "labels": {"site/slurm": "node7"}}},
             {"metadata": {"name": "k-8", "labels": {}}}]
    assert NodeMap.parse("label:site/slurm").to_kubernetes(["node7"], nodes) == ["k-7"]
    with pytest.raises(UnmappedNode, match="node8"):
        NodeMap.parse("label:site/slurm").to_kubernetes(["node8"], nodes)


@pytest.mark.parametrize("rule, table", [("table", {}), ("label:", {}), ("nearest", {}),
                                         ("same", {"a": "b"})])
def test_a_wrong_node_map_is_refused_naming_it(rule: str, table: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="node_"):
        NodeMap.parse(rule, table)
