"""Topology-aware placement on the real 4-node Slurm (docs/placement.md).

The bed's topology/tree: ``leaf1 = node[1-2]``, ``leaf2 = node[3-4]``, ``spine`` over
both. Jobs are small and short; every job a test submits is cancelled at the end, even
when the test fails.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, squeue_bridge_jobs, wait_for

pytestmark = pytest.mark.integration

LEAVES = {"leaf1": {"node1", "node2"}, "leaf2": {"node3", "node4"}}


def _leaf_of(nodes: list[str]) -> set[str]:
    return {leaf for leaf, members in LEAVES.items() if members & set(nodes)}


@pytest.fixture
def submitted(daemon: Daemon) -> Iterator[list[int]]:
    """Ids of the jobs a test submitted; all are cancelled afterwards."""
    ids: list[int] = []
    yield ids
    if ids:
        daemon.cli("alice", "tcancel", *map(str, ids))
        for job_id in ids:
            with contextlib.suppress(AssertionError):
                daemon.wait_state(job_id, ["Cancelled", "Succeeded", "Failed"], timeout=60)


def tbatch(d: Daemon, ids: list[int], cwd: Path, *args: str) -> int:
    res = d.cli("alice", "tbatch", "--time=3", *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", res.stdout)
    assert m, res.stdout
    ids.append(int(m.group(1)))
    return int(m.group(1))


def started(d: Daemon, job_id: int) -> dict[str, Any]:
    job = d.wait_state(job_id, ["Running", "Succeeded", "Failed", "Cancelled"], timeout=120)
    assert job["state"] in ("Running", "Succeeded"), job
    return job


def test_two_node_job_lands_under_one_switch(daemon: Daemon, outdir: Path,
                                             submitted: list[int]) -> None:
    job_id = tbatch(daemon, submitted, outdir, "-N", "2", "--wrap", "sleep 2")
    job = started(daemon, job_id)
    assert len(job["nodes"]) == 2
    assert len(_leaf_of(job["nodes"])) == 1, job["nodes"]
    placement = job["placement"]
    assert placement["mode"] == "constraints" and not placement["pinned"]
    assert len(placement["hosts"]) == 2 and len(placement["levels"][0]["domains"]) == 1
    show = daemon.cli("alice", "tshow", str(job_id)).stdout
    assert re.search(r"Placement=node\[(1-2|3-4)\] Switches=leaf[12] Score=leaf:1,level1:1 "
                     r"Mode=constraints", show), show


def test_switches_waits_and_without_it_spans_both_switches(daemon: Daemon, outdir: Path,
                                                           submitted: list[int]) -> None:
    # One node of each leaf switch busy.
    blockers = [tbatch(daemon, submitted, outdir, "-N", "1", "--exclusive", "-w", node,
                       "--wrap", "sleep 170") for node in ("node1", "node3")]
    for job_id in blockers:
        daemon.wait_state(job_id, ["Running"], timeout=120)

    # --switches=1: two nodes under one leaf switch do not exist now: the job waits.
    waiting = tbatch(daemon, submitted, outdir, "-N", "2", "--switches=1@5",
                     "--wrap", "hostname")
    time.sleep(10)
    job = daemon.job(waiting)
    assert job["state"] == "Pending", job
    assert job["reason"] == "WaitingForTopology", job
    assert "--switches=1" in job["message"] and "leaf switch" in job["message"], job
    assert job["placement"]["waiting"] is True
    assert not [j for j in squeue_bridge_jobs() if j["comment"].endswith(job["uid"])]
    show = daemon.cli("alice", "tshow", str(waiting)).stdout
    assert "Reason=WaitingForTopology" in show and "Mode=constraints(waiting)" in show, show

    # Without it the job spans both leaf switches, on the two free nodes.
    spanning = tbatch(daemon, submitted, outdir, "-N", "2", "--wrap", "hostname")
    job = started(daemon, spanning)
    assert sorted(job["nodes"]) == ["node2", "node4"], job
    assert job["placement"]["hosts"] == ["node2", "node4"]
    assert job["placement"]["levels"][0]["domains"] == ["leaf1", "leaf2"]
    # The constrained job is still waiting for its switch.
    assert daemon.job(waiting)["reason"] == "WaitingForTopology"


def test_nodelist_mode_pins_the_chosen_nodes(testbed: dict[str, str], outdir: Path) -> None:
    """``placement = "nodelist"``: slurmctld gets --nodelist with the bridge's choice."""
    from tests.integration.bed import cleanup, fresh_daemon_dir
    from tests.integration.conftest import rest_settings

    workdir = fresh_daemon_dir("pin")
    d = Daemon(workdir, {**rest_settings(testbed), "placement": "nodelist"})
    d.start()
    ids: list[int] = []
    try:
        job_id = tbatch(d, ids, outdir, "-N", "2", "--wrap", "sleep 1")
        job = started(d, job_id)
        assert job["placement"]["pinned"] is True
        assert sorted(job["nodes"]) == sorted(job["placement"]["hosts"])
        assert len(_leaf_of(job["nodes"])) == 1
        raw = wait_for(lambda: [j for j in squeue_bridge_jobs()
                                if j["comment"].endswith(job["uid"])], 30, "the Slurm job")
        assert raw[0].get("required_nodes") in ("node[1-2]", "node[3-4]"), raw[0]
    finally:
        if ids:
            d.cli("alice", "tcancel", *map(str, ids))
        d.stop()
        cleanup(workdir)
