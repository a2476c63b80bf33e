"""Runtimes from a cluster (bridge/runtimes.py ``RuntimeCatalog.set_layer``,
k8s_adapter/runtime_source.py ``parse_runtime``): they come before files and built-in
runtimes, a copy of a built-in one stays built-in, and a namespaced one serves only
TrainJobs of its namespace that came from the cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from bridge.model import TrainJob, ValidationError, load_trainjob
from bridge.runtimes import CLUSTER_ORIGIN, RuntimeCatalog, builtin_runtimes
from k8s_adapter import runtime_source
from k8s_adapter.runtime_source import ClusterRuntimes, parse_runtime
from tests.unit.builders import trainjob, trainjob_doc


def runtime(kind: str, name: str, image: str, namespace: str | None = None,
            **extra: Any) -> dict[str, Any]:
    """A runtime object as the apiserver lists it (managedFields and all)."""
    meta: dict[str, Any] = {"name": name, "uid": "u-1", "resourceVersion": "7",
                            "managedFields": [{"manager": "kubectl"}],
                            "labels": {"trainer.kubeflow.org/framework": "torch"}}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "metadata": meta, **extra,
            "spec": {"mlPolicy": {"numNodes": 3, "torch": {}}, "template": {"spec": {
                "replicatedJobs": [{"name": "node", "template": {
                    "metadata": {"labels": {
                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{
                        "name": "node", "image": image,
                        "command": ["torchrun", "train.py"]}]}}}}}]}}}}


def namespaced_job(name: str, namespace: str) -> TrainJob:
    doc = trainjob_doc(name, namespace=namespace)
    doc["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    doc["metadata"]["annotations"] = {"hpc-bridge.io/frontdoor": "k8s"}
    return load_trainjob(doc)


def test_a_clusters_runtime_comes_first_and_goes_with_the_object() -> None:
    catalog = RuntimeCatalog()
    catalog.set_layer("k8s", [parse_runtime("ClusterTrainingRuntime", runtime(
        "ClusterTrainingRuntime", "torch-distributed", "site/torch:2"))])
    job = trainjob("torch-distributed")
    job.metadata.annotations["hpc-bridge.io/frontdoor"] = "k8s"
    plan = catalog.resolve(job, CLUSTER_ORIGIN)
    assert (plan.image, plan.num_nodes, plan.command) == (
        "site/torch:2", 3, ("torchrun", "train.py"))
    assert not plan.builtin_image  # the admin's image: the site's default does not win
    catalog.set_layer("k8s", [])  # deleted from the cluster: the built-in one again
    plan = catalog.resolve(trainjob("torch-distributed", command=["python3", "t.py"]))
    assert plan.image != "site/torch:2" and plan.builtin_image


def test_a_new_cluster_runtime_is_listed_and_resolves_for_every_origin() -> None:
    catalog = RuntimeCatalog()
    catalog.set_layer("k8s", [parse_runtime("ClusterTrainingRuntime", runtime(
        "ClusterTrainingRuntime", "site-torch", "site/torch:2"))])
    assert "site-torch" in catalog.names()
    assert catalog.resolve(trainjob("site-torch"), "api").image == "site/torch:2"


def chart_copies() -> list[Any]:
    """The built-in runtimes as the chart installs them (Helm's labels added)."""
    copies = []
    for r in builtin_runtimes():
        doc = r.model_dump(mode="json", by_alias=True, exclude_none=True)
        doc["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "Helm",
                                          "app.kubernetes.io/instance": "hpc-bridge"})
        copies.append(parse_runtime("ClusterTrainingRuntime", doc))
    return copies


def k8s_job(runtime: str, door: str = "k8s", **fields: Any) -> TrainJob:
    doc = trainjob_doc(runtime, command=["python3", "t.py"], **fields)
    doc["metadata"]["annotations"] = {"hpc-bridge.io/frontdoor": door}
    return load_trainjob(doc)


def test_the_charts_copy_of_a_builtin_runtime_stays_builtin() -> None:
    """The chart installs the built-in runtimes as objects: read back, they are still the
    built-in ones (the site's default image still replaces their image)."""
    catalog = RuntimeCatalog()
    catalog.set_layer("k8s", chart_copies())
    assert catalog.resolve(k8s_job("torch-distributed"), CLUSTER_ORIGIN).builtin_image


def test_the_charts_copy_does_not_hide_the_admins_file() -> None:
    mine = parse_runtime("ClusterTrainingRuntime", runtime(
        "ClusterTrainingRuntime", "torch-distributed", "mirror.site/torch:2"))
    catalog = RuntimeCatalog([mine])
    catalog.set_layer("k8s", chart_copies())
    for origin in (CLUSTER_ORIGIN, "api"):
        assert catalog.resolve(k8s_job("torch-distributed"), origin).image == (
            "mirror.site/torch:2")


def test_a_job_sees_its_own_clusters_runtimes_only() -> None:
    """Two doors, two clusters: a TrainJob through door a never gets door b's runtime,
    namespaced or cluster-scoped, whatever its namespace."""
    catalog = RuntimeCatalog()
    catalog.set_layer("b", [
        parse_runtime("TrainingRuntime", runtime("TrainingRuntime", "foo", "b/foo:1", "team-a")),
        parse_runtime("ClusterTrainingRuntime", runtime("ClusterTrainingRuntime", "bar",
                                                        "b/bar:1"))])
    catalog.set_layer("a", [])
    job = namespaced_job("foo", "team-a")
    job.metadata.annotations["hpc-bridge.io/frontdoor"] = "a"
    with pytest.raises(ValidationError, match="unknown TrainingRuntime 'foo'"):
        catalog.resolve(job, CLUSTER_ORIGIN)
    with pytest.raises(ValidationError, match="unknown ClusterTrainingRuntime 'bar'") as exc:
        catalog.resolve(k8s_job("bar", door="a"), CLUSTER_ORIGIN)
    assert "bar" not in str(exc.value).split("known:")[1]  # nor its name
    assert catalog.resolve(k8s_job("bar", door="b"), CLUSTER_ORIGIN).image == "b/bar:1"


def test_the_daemons_files_outrank_a_cluster_for_jobs_from_its_api() -> None:
    mine = parse_runtime("ClusterTrainingRuntime", runtime("ClusterTrainingRuntime", "site",
                                                           "admin/site:1"))
    catalog = RuntimeCatalog([mine])
    catalog.set_layer("k8s", [parse_runtime("ClusterTrainingRuntime", runtime(
        "ClusterTrainingRuntime", "site", "cluster/site:1"))])
    assert catalog.resolve(k8s_job("site"), "api").image == "admin/site:1"
    assert catalog.resolve(k8s_job("site"), CLUSTER_ORIGIN).image == "cluster/site:1"


def test_a_namespaced_runtime_serves_its_namespaces_cluster_jobs_only() -> None:
    catalog = RuntimeCatalog()
    catalog.set_layer("k8s", [parse_runtime("TrainingRuntime", runtime(
        "TrainingRuntime", "team-torch", "team-a/torch:1", namespace="team-a"))])
    job = namespaced_job("team-torch", "team-a")
    assert catalog.resolve(job, CLUSTER_ORIGIN).image == "team-a/torch:1"
    # Through the daemon's API a user names any namespace: not another team's runtime.
    with pytest.raises(ValidationError, match="unknown TrainingRuntime 'team-torch'"):
        catalog.resolve(job, "api")
    with pytest.raises(ValidationError, match="unknown TrainingRuntime"):
        catalog.resolve(namespaced_job("team-torch", "team-b"), CLUSTER_ORIGIN)


def test_a_scope_holds_so_many_runtimes_and_so_big(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_source, "MAX_RUNTIMES_PER_SCOPE", 2)
    source = ClusterRuntimes(None, "k8s", (None,))  # type: ignore[arg-type]
    for name in ("one", "two", "three"):
        source._put("TrainingRuntime", runtime("TrainingRuntime", name, "x", "team-a"))
    source._put("TrainingRuntime", runtime("TrainingRuntime", "elsewhere", "x", "team-b"))
    huge = runtime("ClusterTrainingRuntime", "huge", "x" * (runtime_source.MAX_RUNTIME_BYTES))
    source._put("ClusterTrainingRuntime", huge)
    assert sorted(k[2] for k in source._known) == ["elsewhere", "one", "two"]
    source._drop(("TrainingRuntime", "team-a", "one"))  # room again
    source._put("TrainingRuntime", runtime("TrainingRuntime", "three", "x", "team-a"))
    assert sorted(k[2] for k in source._known) == ["elsewhere", "three", "two"]


def test_parse_keeps_only_the_metadata_a_runtime_needs() -> None:
    obj = runtime("ClusterTrainingRuntime", "site-torch", "site/torch:2")
    obj["kind"] = "Whatever"  # the kind is the listing's, not the object's word
    parsed = parse_runtime("ClusterTrainingRuntime", obj)
    assert parsed.kind == "ClusterTrainingRuntime"
    assert parsed.metadata.name == "site-torch" and parsed.metadata.uid is None
    assert "managedFields" not in parsed.metadata.model_dump(by_alias=True)


def test_a_malformed_runtime_names_the_field() -> None:
    bad = runtime("ClusterTrainingRuntime", "bad", "x")
    bad["spec"]["mlPolicy"]["numNodes"] = "many"
    with pytest.raises(ValidationError, match="numNodes"):
        parse_runtime("ClusterTrainingRuntime", bad)
    nameless = runtime("ClusterTrainingRuntime", "", "x")
    with pytest.raises(ValidationError, match=r"metadata\.name"):
        parse_runtime("ClusterTrainingRuntime", nameless)


class Watches:
    """A Kube whose list_watch plays a script per listing, then waits for ever."""

    def __init__(self, **scripts: list[tuple[str, Any]]) -> None:
        self.scripts = scripts
        self.custom = SimpleNamespace(list_cluster_custom_object=None,
                                      list_namespaced_custom_object=None)
        self.go = asyncio.Event()

    async def list_watch(self, what: str, fn: Any, *args: Any) -> AsyncIterator[tuple[str, Any]]:
        script = self.scripts.get(what.split()[0], [])
        yield script[0]  # the listing
        await self.go.wait()
        for event in script[1:]:
            yield event
        await asyncio.Event().wait()


async def test_the_catalog_follows_the_watch() -> None:
    """Synced once both listings are read; then each change, a malformed version taking
    the runtime out and a deletion too."""
    bad = runtime("ClusterTrainingRuntime", "site-b", "x")
    bad["spec"]["mlPolicy"]["numNodes"] = "many"
    kube = Watches(
        ClusterTrainingRuntimes=[
            ("SYNC", [runtime("ClusterTrainingRuntime", "site-a", "a:1"),
                      runtime("ClusterTrainingRuntime", "site-b", "b:1")]),
            ("MODIFIED", bad), ("DELETED", runtime("ClusterTrainingRuntime", "site-a", "a:1")),
            ("ADDED", runtime("ClusterTrainingRuntime", "site-c", "c:1"))],
        TrainingRuntimes=[("SYNC", [runtime("TrainingRuntime", "team", "t:1", "team-a")])])
    seen: list[list[str]] = []
    changed = asyncio.Event()

    def apply(runtimes: list[Any]) -> None:
        seen.append(sorted(r.metadata.name for r in runtimes))
        changed.set()

    source = ClusterRuntimes(kube, "k8s", ("team-a",), apply)  # type: ignore[arg-type]
    task = asyncio.create_task(source.run(["ClusterTrainingRuntime", "TrainingRuntime"]))
    try:
        await asyncio.wait_for(source.synced.wait(), 5)
        assert seen == [["site-a", "site-b", "team"]]
        kube.go.set()
        async with asyncio.timeout(5):
            while seen[-1] != ["site-c", "team"]:
                changed.clear()
                await changed.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
