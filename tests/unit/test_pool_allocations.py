"""pool_adapter.allocations: which allocation labels on nodes have outlived their
Slurm job (a stale one would let a namespace's pods onto the pool past the admission
policy)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendJob, BackendState
from pool_adapter.allocations import (
    MAX_STOP_SECONDS,
    StaleLabels,
    StrandedPod,
    StrandedPods,
    holds_nodes,
    labelled_ids,
)

S = BackendState


def node(name: str, *ids: str, **other: str) -> dict[str, Any]:
    labels = {f"slurm.hpc-bridge.io/job-{i}": "team-a" for i in ids} | other
    return {"metadata": {"name": name, "labels": labels}}


def job(jid: str, state: BackendState) -> BackendJob:
    return BackendJob(jid, f"uid-{jid}", state, native_state=state.value.upper())


def test_only_well_formed_allocation_labels_count() -> None:
    nodes = [node("n1", "5", "7", **{"hpc-bridge.io/slurm-pool": "true"}),
             node("n2", "7"), {"metadata": {"name": "n3"}}, {},
             {"metadata": {"labels": {"slurm.hpc-bridge.io/job-x1": "a",
                                      "slurm.hpc-bridge.io/job-": "b",
                                      "slurm.hpc-bridge.io/job-٣": "c"}}}]
    assert labelled_ids(nodes) == {"5", "7"}


def test_a_label_is_stale_after_its_job_has_not_held_nodes_for_the_grace() -> None:
    stale = StaleLabels(grace=10)
    nodes = [node("n1", "5", "6", "7", "8")]
    jobs = [job("5", S.RUNNING), job("6", S.COMPLETED), job("8", S.PENDING)]
    assert stale.update(nodes, jobs, now=100) == []
    assert stale.update(nodes, jobs, now=109.9) == []
    # 6 finished, 7 absent, 8 waits (requeued: its nodes are Slurm's again): stale;
    # 5 runs.
    assert stale.update(nodes, jobs, now=110) == ["6", "7", "8"]


def test_a_job_seen_alive_again_starts_its_grace_anew() -> None:
    """A holder newer than the snapshot being read shows up alive in the next one."""
    stale = StaleLabels(grace=10)
    nodes = [node("n1", "9")]
    assert stale.update(nodes, [], now=0) == []
    assert stale.update(nodes, [job("9", S.RUNNING)], now=5) == []
    assert stale.update(nodes, [], now=12) == []
    assert stale.update(nodes, [], now=22) == ["9"]


def test_a_label_that_went_is_forgotten() -> None:
    stale = StaleLabels(grace=0)
    assert stale.update([node("n1", "3")], [], now=0) == ["3"]
    assert stale.update([node("n1")], [], now=1) == []
    assert not stale.pending


def test_retry_later_waits_another_grace() -> None:
    stale = StaleLabels(grace=10)
    nodes = [node("n1", "3")]
    assert stale.update(nodes, [], now=0) == []
    assert stale.update(nodes, [], now=10) == ["3"]
    stale.retry_later("3", now=10)
    assert stale.update(nodes, [], now=19) == []
    assert stale.update(nodes, [], now=20) == ["3"]


@given(st.sets(st.integers(1, 50)), st.sets(st.integers(1, 50)))
def test_never_a_running_job_and_always_every_dead_one(labelled: set[int],
                                                      running: set[int]) -> None:
    stale = StaleLabels(grace=1)
    nodes = [node("n", *map(str, labelled))]
    jobs = [job(str(i), S.RUNNING) for i in running]
    stale.update(nodes, jobs, now=0)
    got = set(stale.update(nodes, jobs, now=1))
    assert got == {str(i) for i in labelled - running}


def pod(name: str, node_name: str | None, *ids: str, grace: int | None = None,
        **selector: str) -> dict[str, Any]:
    sel = {f"slurm.hpc-bridge.io/job-{i}": "team-a" for i in ids} | selector
    return {"metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": node_name, "nodeSelector": sel,
                     "terminationGracePeriodSeconds": grace}}


def test_a_pod_is_stranded_when_its_node_lost_the_allocation_it_selects() -> None:
    nodes = {"n1": node("n1", "5"), "n2": node("n2")}
    pods = [pod("ok", "n1", "5"), pod("left", "n2", "5", grace=3600),
            pod("plain", "n2", gpu="a100"), pod("elsewhere", "kwok-1", "5"),
            pod("unbound", None, "5"), pod("quick", "n1", "6", grace=2)]
    stranded = StrandedPods(grace=10)
    assert stranded.update(pods, nodes, now=0) == []
    assert stranded.update(pods, nodes, now=10) == [
        # a pod's own grace is capped: one ignoring SIGTERM keeps no node for long
        StrandedPod("team-a", "left", "", "n2", "slurm.hpc-bridge.io/job-5",
                    MAX_STOP_SECONDS),
        StrandedPod("team-a", "quick", "", "n1", "slurm.hpc-bridge.io/job-6", 2)]


def test_which_slurm_states_hold_nodes() -> None:
    for state in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RUNNING+SIGNALING",
                  "completing"):
        assert holds_nodes(state), state
    for state in ("PENDING", "COMPLETED", "CANCELLED", "TIMEOUT", "REQUEUED",
                  "PENDING+REQUEUE_HOLD", "CONFIGURING", "", "UNKNOWN", "NODE_FAIL"):
        assert not holds_nodes(state), state


def test_a_pin_whose_label_shows_late_is_not_stranded() -> None:
    """The node watch may show a new allocation's label after its pods are bound."""
    stranded = StrandedPods(grace=10)
    pods = [pod("new", "n1", "7")]
    assert stranded.update(pods, {"n1": node("n1")}, now=0) == []
    assert stranded.update(pods, {"n1": node("n1", "7")}, now=5) == []
    assert stranded.update(pods, {"n1": node("n1", "7")}, now=30) == []
    assert not stranded.pending
