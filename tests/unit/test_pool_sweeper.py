"""pool_adapter.sweeper: what the safety net removes and deletes, on which nodes, and
what it asks Slurm first (fakes for the two worlds; the real ones in
tests/integration/test_k8s_on_slurm.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from bridge.backend import BackendJob, BackendState
from k8s_adapter.kube import KubeRejected
from pool_adapter.sweeper import AllocationSweeper

LABEL = "slurm.hpc-bridge.io/job-"


class FakeCli:
    """squeue: a job not in ``states`` is unknown to Slurm (None)."""

    def __init__(self, states: dict[str, str], squeue: bool = True):
        self.states = states
        self.squeue = squeue
        self.asked: list[str] = []

    def has(self, name: str) -> bool:
        return self.squeue

    async def job_state_if_known(self, job_id: str) -> str | None:
        self.asked.append(job_id)
        return self.states.get(job_id)


class FakeKube:
    """The apiserver's nodes (what a fresh read sees)."""

    def __init__(self, nodes: list[dict[str, Any]]):
        self.nodes = nodes
        self.core = self

    def read_node(self, name: str) -> None:  # the call raw() is given
        raise AssertionError("raw() is faked")

    async def raw(self, what: str, fn: Any, name: str) -> dict[str, Any]:
        found = [n for n in self.nodes if n["metadata"]["name"] == name]
        if not found:  # as Kube.raw answers a 404
            raise KubeRejected(f"Kubernetes API refused to {what} (404): not found", 404)
        return found[0]


class FakeK8s:
    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]):
        self.nodes, self.pods, self.version = nodes, pods, 1
        self.pod_reads = 0
        self.kube = FakeKube(nodes)

    def known_nodes(self) -> list[dict[str, Any]]:
        return self.nodes

    def bound_pods(self) -> list[dict[str, Any]]:
        self.pod_reads += 1
        return self.pods

    def capacity_version(self) -> int:
        return self.version


class FakeBinder:
    def __init__(self) -> None:
        self.unlabelled: list[str] = []
        self.deleted: list[tuple[str, str, int, str | None]] = []

    async def unlabel(self, slurm_id: str) -> None:
        self.unlabelled.append(slurm_id)

    async def delete_pod(self, namespace: str, name: str, grace: int,
                         uid: str | None = None) -> None:
        self.deleted.append((namespace, name, grace, uid))


def node(name: str, *ids: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {LABEL + i: "ns" for i in ids}}}


def pod(name: str, node_name: str, slurm_id: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta},
            "spec": {"nodeName": node_name, "nodeSelector": {LABEL + slurm_id: "ns"}}}


def sweeper(nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
            states: dict[str, str], pool: frozenset[str] | None = frozenset({"node1", "node2"}),
            squeue: bool = True) -> tuple[AllocationSweeper, FakeBinder, FakeCli, FakeK8s,
                                          list[Coroutine[Any, Any, None]]]:
    cli, k8s, binder = FakeCli(states, squeue), FakeK8s(nodes, pods), FakeBinder()
    spawned: list[Coroutine[Any, Any, None]] = []

    class Slurm:
        pass

    slurm = Slurm()
    slurm.cli = cli  # type: ignore[attr-defined]

    class States:
        pool_nodes = pool

    sw = AllocationSweeper("pool", slurm, k8s, binder, States(),  # type: ignore[arg-type]
                           lambda what, coro: spawned.append(coro), grace=10)
    return sw, binder, cli, k8s, spawned


def run_all(spawned: list[Coroutine[Any, Any, None]]) -> None:
    async def go() -> None:
        while spawned:
            await spawned.pop(0)
    asyncio.run(go())


def running(jid: str, native: str = "RUNNING") -> BackendJob:
    return BackendJob(jid, f"uid-{jid}", BackendState.RUNNING, native_state=native)


def test_a_stale_label_goes_only_after_squeue_confirms_and_only_on_the_pools_nodes() -> None:
    nodes = [node("node1", "5", "6", "7"), node("kwok-1", "8")]  # kwok-1: another cluster's
    sw, binder, cli, _, spawned = sweeper(nodes, [], {"6": "RUNNING", "7": "COMPLETED"})
    sw.on_snapshot([], now=0)
    sw.on_snapshot([], now=10)
    run_all(spawned)
    # 5 unknown to Slurm, 7 completed: removed; 6 missing from the listing but running
    # per squeue: kept; 8 is not on this pool's nodes: never asked about.
    assert sorted(cli.asked) == ["5", "6", "7"]
    assert sorted(binder.unlabelled) == ["5", "7"]
    # Asked again only after another grace (6 still looks stale in the listing).
    sw.on_snapshot([], now=15)
    assert not spawned
    sw.on_snapshot([], now=20)
    assert len(spawned) == 3
    run_all(spawned)


def test_a_label_that_comes_back_is_cleared_again() -> None:
    """No once-per-run memory: a pin written after the cleanup is caught too."""
    nodes = [node("node1", "5")]
    sw, binder, _, k8s, spawned = sweeper(nodes, [], {})
    for now in (0, 10):
        sw.on_snapshot([], now=now)
    run_all(spawned)
    k8s.nodes = [node("node1")]
    sw.on_snapshot([], now=11)
    k8s.nodes = [node("node1", "5")]
    for now in (12, 22):
        sw.on_snapshot([], now=now)
    run_all(spawned)
    assert binder.unlabelled == ["5", "5"]


def test_nothing_is_removed_without_squeue_or_before_the_pool_is_known() -> None:
    sw, binder, _, _, spawned = sweeper([node("node1", "5")], [], {}, squeue=False)
    for now in (0, 10):
        sw.on_snapshot([], now=now)
    run_all(spawned)
    assert binder.unlabelled == []
    sw, binder, _, _, spawned = sweeper([node("node1", "5")], [], {}, pool=None)
    for now in (0, 10):
        sw.on_snapshot([], now=now)
    assert not spawned


def test_a_running_holder_keeps_its_label_and_its_pods() -> None:
    nodes = [node("node1", "5")]
    sw, _, cli, _, spawned = sweeper(nodes, [pod("p", "node1", "5")], {})
    for now in (0, 10, 20):
        sw.on_snapshot([running("5")], now=now)
    assert not spawned and not cli.asked


def test_pods_stranded_on_the_pools_nodes_are_deleted_once_per_grace() -> None:
    nodes = [node("node1"), node("node2", "9"), node("kwok-1")]
    pods = [pod("left", "node1", "5"), pod("fine", "node2", "9"),
            pod("theirs", "kwok-1", "5")]
    sw, binder, _, _, spawned = sweeper(nodes, pods, {"9": "RUNNING"})
    sw.on_snapshot([running("9")], now=0)
    sw.on_snapshot([running("9")], now=10)
    run_all(spawned)
    assert binder.deleted == [("ns", "left", 30, "uid-left")]
    sw.on_snapshot([running("9")], now=12)
    assert not spawned


def test_pods_are_not_read_again_while_nothing_changed() -> None:
    """A cost per change: an idle pool reads no pods at each Slurm snapshot."""
    sw, _, _, k8s, _ = sweeper([node("node1", "9")], [pod("fine", "node1", "9")],
                               {"9": "RUNNING"})
    for now in range(5):
        sw.on_snapshot([running("9")], now=now)
    assert k8s.pod_reads == 1
    k8s.version += 1
    sw.on_snapshot([running("9")], now=6)
    assert k8s.pod_reads == 2


def test_a_waiting_holders_label_goes_its_nodes_are_slurms_again() -> None:
    """Requeued, or held by the bridge's suspend: the unpin's label removal may have
    failed; the net removes it (squeue says PENDING). A holder suspended in place by
    Slurm, or completing, keeps its nodes and its label."""
    nodes = [node("node1", "5", "6", "7")]
    held = BackendJob("5", "uid-5", BackendState.SUSPENDED, native_state="PENDING")
    jobs = [held, BackendJob("6", "uid-6", BackendState.SUSPENDED, native_state="SUSPENDED"),
            running("7", "COMPLETING")]
    sw, binder, cli, _, spawned = sweeper(nodes, [], {"5": "PENDING"})
    for now in (0, 10):
        sw.on_snapshot(jobs, now=now)
    run_all(spawned)
    assert cli.asked == ["5"] and binder.unlabelled == ["5"]


def test_an_empty_squeue_answer_proves_nothing() -> None:
    """PrivateData hides a job: squeue prints nothing with exit 0."""
    sw, binder, _, _, spawned = sweeper([node("node1", "5")], [], {"5": ""})
    for now in (0, 10):
        sw.on_snapshot([], now=now)
    run_all(spawned)
    assert binder.unlabelled == []


def test_a_stranded_pod_is_kept_when_the_apiserver_shows_the_label() -> None:
    """The node watch may lag (or stall): a fresh read decides."""
    pods = [pod("new", "node1", "9")]
    sw, binder, _, k8s, spawned = sweeper([node("node1")], pods, {"9": "RUNNING"})
    k8s.kube.nodes = [node("node1", "9")]
    for now in (0, 10):
        sw.on_snapshot([running("9")], now=now)
    run_all(spawned)
    assert binder.deleted == []


def test_a_stranded_pod_whose_node_is_gone_is_deleted() -> None:
    """The node was deleted after the watch saw it: its label went with it."""
    pods = [pod("orphan", "node1", "9")]
    sw, binder, _, k8s, spawned = sweeper([node("node1")], pods, {"9": "RUNNING"})
    k8s.kube.nodes = []
    for now in (0, 10):
        sw.on_snapshot([running("9")], now=now)
    run_all(spawned)
    assert [(d[0], d[1], d[3]) for d in binder.deleted] == [("ns", "orphan", "uid-orphan")]


def test_a_pod_being_deleted_is_left_to_finish_and_costs_nothing_more() -> None:
    pods = [pod("going", "node1", "5", deletionTimestamp="2026-12-05T06:00:00Z")]
    sw, _, _, k8s, spawned = sweeper([node("node1")], pods, {})
    for now in (0, 10, 20):
        sw.on_snapshot([], now=now)
    assert not spawned and k8s.pod_reads == 1


def test_the_watch_cache_keeps_what_the_sweep_reads_of_a_pod() -> None:
    """Without these fields in the Kubernetes back end's trimmed pods the stranded-pod
    net would silently find nothing."""
    from k8s_adapter.capacity import trim as _trim

    full = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                         "deletionTimestamp": "2026-12-05T06:00:00Z",
                         "annotations": {"big": "x" * 1000}},
            "spec": {"nodeName": "node1", "nodeSelector": {LABEL + "5": "ns"},
                     "terminationGracePeriodSeconds": 7, "containers": []}}
    trimmed = _trim(full)
    assert trimmed["metadata"]["uid"] == "u1"
    assert trimmed["metadata"]["deletionTimestamp"] == "2026-12-05T06:00:00Z"
    assert "annotations" not in trimmed["metadata"]
    assert trimmed["spec"]["nodeSelector"] == {LABEL + "5": "ns"}
    assert trimmed["spec"]["terminationGracePeriodSeconds"] == 7
