"""pool_adapter.allocations: which allocation labels on nodes have outlived their
Slurm job (a stale one would let a namespace's pods onto the pool past the admission
policy)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendJob, BackendState
from pool_adapter.allocations import StaleLabels, labelled_ids

S = BackendState


def node(name: str, *ids: str, **other: str) -> dict[str, Any]:
    labels = {f"slurm.hpc-bridge.io/job-{i}": "team-a" for i in ids} | other
    return {"metadata": {"name": name, "labels": labels}}


def job(jid: str, state: BackendState) -> BackendJob:
    return BackendJob(jid, f"uid-{jid}", state)


def test_only_well_formed_allocation_labels_count() -> None:
    nodes = [node("n1", "5", "7", **{"hpc-bridge.io/slurm-pool": "true"}),
             node("n2", "7"), {"metadata": {"name": "n3"}}, {},
             {"metadata": {"labels": {"slurm.hpc-bridge.io/job-x1": "a",
                                      "slurm.hpc-bridge.io/job-": "b",
                                      "slurm.hpc-bridge.io/job-٣": "c"}}}]
    assert labelled_ids(nodes) == {"5", "7"}


def test_a_label_is_stale_after_its_job_has_been_gone_or_finished_for_the_grace() -> None:
    stale = StaleLabels(grace=10)
    nodes = [node("n1", "5", "6", "7", "8")]
    jobs = [job("5", S.RUNNING), job("6", S.COMPLETED), job("8", S.PENDING)]
    assert stale.update(nodes, jobs, now=100) == []
    assert stale.update(nodes, jobs, now=109.9) == []
    # 6 finished, 7 absent: stale; 5 runs, 8 waits (requeued: the bridge unpins it).
    assert stale.update(nodes, jobs, now=110) == ["6", "7"]


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
    assert stale._dead_since == {}


@given(st.sets(st.integers(1, 50)), st.sets(st.integers(1, 50)))
def test_never_a_running_job_and_always_every_dead_one(labelled: set[int],
                                                      running: set[int]) -> None:
    stale = StaleLabels(grace=1)
    nodes = [node("n", *map(str, labelled))]
    jobs = [job(str(i), S.RUNNING) for i in running]
    stale.update(nodes, jobs, now=0)
    got = set(stale.update(nodes, jobs, now=1))
    assert got == {str(i) for i in labelled - running}
