"""In a Flux job: a task's node comes from its task rank (the broker order of R), not its host
name: several brokers may share one host name (``flux start --test-size``, several
brokers per node), and each must still be its own node. And Open MPI's mpirun must not
pick its pmix/flux component."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpi_launch.__main__ import read_allocation
from mpi_launch.allocation import flux_node_rank
from mpi_launch.plan import LaunchOptions, plan_launch

#: Two brokers (ranks 0 and 1) on one host named "box", 2 cores each.
SAME_HOST_R = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-1", "children": {"core": "0-1"}}], "nodelist": ["box,box"],
    "starttime": 0, "expiration": 0}}


def flux_env(rank: int, size: int, nnodes: int) -> dict[str, str]:
    return {"FLUX_JOB_ID": "f1", "FLUX_TASK_RANK": str(rank), "FLUX_JOB_SIZE": str(size),
            "FLUX_JOB_NNODES": str(nnodes), "FLUX_TASK_LOCAL_ID": "0"}


def test_brokers_sharing_a_host_name_are_distinct_nodes(tmp_path: Path) -> None:
    r = tmp_path / "R"
    r.write_text(json.dumps(SAME_HOST_R))
    ranks = [read_allocation("flux", flux_env(task, 2, 2), flux_r=str(r),
                             hostname="box").node_rank for task in (0, 1)]
    assert ranks == [0, 1]  # torch's PET_NODE_RANK: one node 0, one node 1


def test_two_tasks_per_node(tmp_path: Path) -> None:
    r = tmp_path / "R"
    r.write_text(json.dumps(SAME_HOST_R))
    got = [read_allocation("flux", flux_env(task, 4, 2), flux_r=str(r),
                           hostname="box").node_rank for task in range(4)]
    assert got == [0, 0, 1, 1]


@given(st.integers(1, 64), st.integers(1, 16), st.data())
def test_block_task_map(nnodes: int, per_node: int, data: st.DataObject) -> None:
    rank = data.draw(st.integers(0, nnodes * per_node - 1))
    assert flux_node_rank(flux_env(rank, nnodes * per_node, nnodes)) == rank // per_node


def test_no_rank_without_the_job_shell_variables() -> None:
    assert flux_node_rank({}) is None
    assert flux_node_rank(flux_env(0, 3, 2)) is None  # uneven: not the bridge's jobs
    assert flux_node_rank(flux_env(5, 4, 2)) is None
    assert flux_node_rank({**flux_env(0, 2, 2), "FLUX_JOB_SIZE": "x"}) is None


def test_open_mpi_launched_in_a_flux_job_avoids_the_flux_pmix_component(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mpirun (run by mpi-launch, by the command, or by a batch script) segfaults in a
    Flux job when Open MPI picks pmix/flux; ranks that Flux starts need it."""
    monkeypatch.delenv("OMPI_MCA_pmix", raising=False)
    r = tmp_path / "R"
    r.write_text(json.dumps(SAME_HOST_R))
    alloc = read_allocation("flux", flux_env(0, 2, 2), flux_r=str(r), hostname="box")
    for opts in (LaunchOptions("mpi", ("python", "x.py")),
                 LaunchOptions("mpi", ("mpirun", "a.out")),
                 LaunchOptions("mpi", ("job.sh",), launcher="none")):
        assert plan_launch(alloc, opts, str(tmp_path)).env["OMPI_MCA_pmix"] == "^flux"
    ranks = plan_launch(alloc, LaunchOptions("plain", ("a.out",)), str(tmp_path))
    assert "OMPI_MCA_pmix" not in ranks.env
    mpich = plan_launch(alloc, LaunchOptions("mpi", ("a.out",), mpi="mpich"), str(tmp_path))
    assert "OMPI_MCA_pmix" not in mpich.env
    monkeypatch.setenv("OMPI_MCA_pmix", "mine")  # the job's own choice wins
    assert "OMPI_MCA_pmix" not in plan_launch(alloc, LaunchOptions("mpi", ("a.out",)),
                                              str(tmp_path)).env
