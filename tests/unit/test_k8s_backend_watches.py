"""What the Kubernetes back end takes from its watches.

* Capacity from two pod watches: the bridges' own pods come from the job pod watch
  (decoded once), every other bound pod from the capacity watch, whose selectors
  together select exactly what one watch of BOUND_PODS did.
* The JobSet watch tells ``on_jobs_status`` listeners of each change of a JobSet's
  ``replicatedJobsStatus`` (the TrainJob door's ``jobsStatus``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from bridge.backend import BackendUnavailable
from k8s_adapter.backend import SELECTOR, KubernetesBackend
from k8s_adapter.capacity import (
    BOUND_PODS,
    NODES,
    OTHER_BOUND_PODS,
    OTHER_PODS,
    Capacity,
    holds_capacity,
)
from k8s_adapter.jobset import JobSetOptions
from k8s_adapter.kube import KubeSettings


def pod(name: str, node: str | None, phase: str, cpu: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                         "labels": {"app.kubernetes.io/managed-by": "hpc-bridge"}},
            "spec": {"nodeName": node,
                     "containers": [{"resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "8Gi"}}}


def backend() -> KubernetesBackend:
    return KubernetesBackend("k8s", KubeSettings(kubeconfig="/nonexistent"), JobSetOptions())


def test_the_two_selectors_split_the_pods_by_the_same_label() -> None:
    label, _, value = SELECTOR.partition("=")
    assert f"{label}!={value}" == OTHER_PODS  # Kubernetes: also pods without the label


@pytest.mark.parametrize(("node_name", "phase", "holds"), [
    ("n1", "Running", True), ("n1", "Pending", True), ("n1", "Unknown", True),
    ("n1", "Succeeded", False), ("n1", "Failed", False), (None, "Pending", False),
    ("", "Pending", False)])
def test_holds_capacity_is_what_bound_pods_selects(node_name: str | None, phase: str,
                                                  holds: bool) -> None:
    assert holds_capacity(pod("p", node_name, phase)) is holds


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


def test_own_pods_follow_the_job_pod_watch() -> None:
    cap = Capacity()
    cap.note(OTHER_BOUND_PODS, "SYNC", [pod("x", "n2", "Running")])
    v0 = cap.version
    cap.note_own("SYNC", [pod("a", "n1", "Running"), pod("b", None, "Pending"),
                          pod("c", "n1", "Succeeded")])
    assert names(cap.bound_pods()) == ["a", "x"]
    assert cap.version > v0
    v1 = cap.version
    cap.note_own("MODIFIED", pod("b", "n2", "Running"))  # bound now
    assert names(cap.bound_pods()) == ["a", "b", "x"]
    cap.note_own("MODIFIED", pod("a", "n1", "Succeeded"))  # finished: gives room back
    assert names(cap.bound_pods()) == ["b", "x"]
    cap.note_own("DELETED", pod("b", "n2", "Running"))
    assert names(cap.bound_pods()) == ["x"]
    assert cap.version == v1 + 3
    cap.note_own("MODIFIED", pod("z", None, "Pending"))  # never held any: no change
    cap.note_own("DELETED", pod("z", None, "Pending"))
    assert cap.version == v1 + 3
    cap.note_own("SYNC", [])  # a re-list drops what is gone
    assert names(cap.bound_pods()) == ["x"]


def test_the_inventory_counts_own_pods_once_every_watch_listed() -> None:
    b = backend()
    cap = b._capacity
    cap.note(NODES, "SYNC", [node("n1"), node("n2")])
    cap.note(OTHER_BOUND_PODS, "SYNC", [pod("x", "n2", "Running", cpu="2")])
    listed: list[str] = []

    async def raw(what: str, *args: Any, **kwargs: Any) -> Any:
        listed.append(what)
        raise BackendUnavailable("not here")

    b.kube.raw = raw  # type: ignore[method-assign]
    b.kube.core = SimpleNamespace(list_node=None, list_pod_for_all_namespaces=None)
    # The job pod watch has not listed yet: the inventory is read from the apiserver
    # rather than made without the bridges' own pods.
    with pytest.raises(BackendUnavailable):
        asyncio.run(b.inventory())
    assert listed == ["list nodes"]
    cap.note_own("SYNC", [pod("a", "n1", "Running", cpu="3")])
    inv = asyncio.run(b.inventory())
    free = {n.name: n.free_cpus for n in inv.nodes}
    assert free == {"n1": 5, "n2": 6}
    assert listed == ["list nodes"]  # from the watches this time


def jobset(uid: str, active: int, ready: int, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": f"js-{uid}", "namespace": "ns", "resourceVersion": rv,
                         "labels": {"hpc-bridge.io/job-uid": uid,
                                    "app.kubernetes.io/managed-by": "hpc-bridge"}},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]},
            "status": {"replicatedJobsStatus": [
                {"name": "node", "active": active, "ready": ready, "succeeded": 0,
                 "failed": 0, "suspended": 0}]}}


def test_a_change_of_jobs_status_within_a_state_is_told_to_listeners() -> None:
    """A JobSet whose pods became ready stays Running: only the listeners of
    on_jobs_status tell the TrainJob door that its jobsStatus is stale."""
    b = backend()
    events: list[tuple[str, Any]] = [
        ("SYNC", [jobset("a", 0, 0, "1")]),
        ("MODIFIED", jobset("a", 1, 0, "2")),  # Running now
        ("MODIFIED", jobset("a", 1, 1, "3")),  # ready: the same state
        ("MODIFIED", jobset("a", 1, 1, "4")),  # nothing the status shows
        ("MODIFIED", jobset("b", 1, 0, "5")),
        ("DELETED", jobset("a", 1, 1, "6")),
    ]
    told: list[str] = []
    stop = b.on_jobs_status(told.append)
    # A batch per event that changed the engine's view: not for the two within Running.
    batches = run_watch(b, {"JobSets": events}, 4)
    assert [(bj.job_uid, bj.state.value) for batch in batches for bj in batch.jobs][:3] == [
        ("a", "PENDING"), ("a", "RUNNING"), ("b", "RUNNING")]
    assert batches[3].jobs[0].job_uid == "a"  # its deletion
    assert told == ["a", "a", "a", "b", "a"]  # not for the event that changed nothing
    assert b.jobs_status("ns", "b") == [{"name": "node", "active": 1, "ready": 0,
                                         "succeeded": 0, "failed": 0, "suspended": 0}]
    stop()
    b._jobs_status_changed(["b"])
    assert told == ["a", "a", "a", "b", "a"]


def run_watch(b: KubernetesBackend, events: dict[str, list[tuple[str, Any]]],
              batches: int) -> list[Any]:
    """Drive ``b.watch`` with fake list-watches (by what they watch: events, then
    nothing) and take ``batches`` batches; a list-watch whose events end in an
    exception raises it."""
    async def list_watch(what: str, *args: Any, **kwargs: Any) -> Any:
        for event in events.get(what, []):
            await asyncio.sleep(0)  # the other watches get their turn, as on a socket
            if isinstance(event, BaseException):
                raise event
            yield event
        await asyncio.Event().wait()

    b.kube.list_watch = list_watch  # type: ignore[method-assign]
    b.kube.custom = SimpleNamespace(list_cluster_custom_object=None)
    b.kube.core = SimpleNamespace(list_pod_for_all_namespaces=None, list_node=None)

    async def go() -> list[Any]:
        got = []
        stream = b.watch(1.0)
        try:
            while len(got) < batches:
                got.append(await asyncio.wait_for(anext(stream), 10))
        finally:
            await stream.aclose()
        return got
    return asyncio.run(go())


def test_a_listener_that_raises_stops_neither_the_others_nor_the_watch() -> None:
    b = backend()
    told: list[str] = []

    def bad(uid: str) -> None:
        raise ValueError("a listener's bug")

    b.on_jobs_status(bad)
    b.on_jobs_status(told.append)
    got = run_watch(b, {"JobSets": [("SYNC", []), ("MODIFIED", jobset("a", 1, 0, "2")),
                                    ("MODIFIED", jobset("a", 1, 1, "3")),
                                    ("MODIFIED", jobset("b", 1, 0, "4"))]}, 3)
    assert len(got) == 3 and told == ["a", "a", "b"]


def test_a_relist_tells_of_jobsets_gone_meanwhile() -> None:
    b = backend()
    told: list[str] = []
    b.on_jobs_status(told.append)
    run_watch(b, {"JobSets": [("SYNC", [jobset("a", 1, 0, "1"), jobset("b", 1, 0, "1")]),
                              ("SYNC", [jobset("b", 1, 1, "5")])]}, 2)
    assert told == ["a", "b", "a", "b"]  # a: gone (jobs_status None now)
    assert b.jobs_status("ns", "a") is None


def test_a_watch_task_that_dies_ends_the_stream_with_its_error() -> None:
    """The engine then starts the watch again (bridge/engine.py _track), rather than
    the back end going on without its node watch."""
    b = backend()
    with pytest.raises(RuntimeError, match="watch-nodes ended") as err:
        run_watch(b, {"nodes": [("SYNC", [node("n1")]), KeyError("a bug")]}, 1)
    assert isinstance(err.value.__cause__, KeyError)


def test_a_watch_that_stops_leaves_no_inventory_served_from_its_caches() -> None:
    b = backend()
    levels = ("kubernetes.io/hostname",)
    seen: list[bool] = []

    def note(uid: str) -> None:  # at the JobSets' SYNC: the other watches listed first
        seen.append(b._capacity.inventory(levels) is not None)

    b.on_jobs_status(note)
    nodes_first = [("SYNC", [node("n1")])]
    run_watch(b, {"nodes": nodes_first, "bound pods": [("SYNC", [])], "pods": [("SYNC", [])],
                  "JobSets": [("SYNC", []), ("MODIFIED", jobset("a", 0, 1, "1"))]}, 2)
    assert seen == [True]
    # The stream was closed: the caches are no longer followed.
    assert b._capacity.inventory(levels) is None


def test_the_job_pods_are_watched_bound_and_failed_only_the_bound_hold_capacity() -> None:
    """Two pod watches of the bridges' pods, each by a field selector (a pod that runs
    and succeeds is then three events, not seven); a failed pod holds no capacity."""
    b = backend()
    asked: dict[str, dict[str, Any]] = {}
    levels = ("kubernetes.io/hostname",)

    async def list_watch(what: str, *args: Any, **kwargs: Any) -> Any:
        asked[what] = kwargs
        events = {"nodes": [("SYNC", [node("n1")])], "bound pods": [("SYNC", [])],
                  "pods": [("SYNC", [pod("a", "n1", "Running", cpu="3")])],
                  "failed pods": [("SYNC", [pod("f", "n1", "Failed", cpu="4")])],
                  "JobSets": [("SYNC", [])]}.get(what, [])
        for event in events:
            await asyncio.sleep(0)
            yield event
        await asyncio.Event().wait()

    b.kube.list_watch = list_watch  # type: ignore[method-assign]
    b.kube.custom = SimpleNamespace(list_cluster_custom_object=None)
    b.kube.core = SimpleNamespace(list_pod_for_all_namespaces=None, list_node=None)

    async def go() -> list[str]:
        stream = b.watch(1.0)
        try:
            await asyncio.wait_for(anext(stream), 10)  # the JobSets' listing
            for _ in range(20):  # every watch has had its turns
                await asyncio.sleep(0)
            assert b._capacity.inventory(levels) is not None  # all sources listed
            return sorted(b._capacity.own)
        finally:
            await stream.aclose()

    assert asyncio.run(go()) == ["ns/a"]
    assert asked["pods"] == {"label_selector": SELECTOR, "field_selector": BOUND_PODS}
    assert asked["failed pods"] == {"label_selector": SELECTOR,
                                    "field_selector": "status.phase=Failed"}
