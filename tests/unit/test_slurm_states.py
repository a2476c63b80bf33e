"""Slurm state / exit code / node mapping, from JSON recorded on the 22.05 test bed.

Fixtures (tests/unit/fixtures/slurm/, trimmed to the fields the adapter reads):

* ``v0.0.38_jobs.json`` — slurmrestd ``GET /slurm/v0.0.38/jobs``; ``squeue_22.05_jobs.json``
  — ``squeue --json`` of the same moment (identical records). Jobs were submitted as
  alice with ``--comment=hpc-bridge:fx-*``: ``exit 0`` on 2 nodes, ``exit 3``,
  ``kill -9 $$``, ``sleep`` (running), scancel, ``-t 1`` (timeout), ``-N 9`` (pending),
  an array of 2, ``srun false``, and one that ignores SIGTERM then was cancelled.
* ``v0.0.38_jobs_completing.json`` — that last job caught while COMPLETING.
* ``v0.0.38_nodes.json`` / ``sinfo_22.05_nodes.json`` — ``GET /nodes`` / ``sinfo --json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import BackendState
from slurm_adapter.backend import backend_state, gpu_count, job_from_slurm, node_from_slurm
from slurm_adapter.dialects import V0_0_38, dialect_from_meta
from slurm_adapter.topology import parse_topology

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def jobs_by_comment(name: str) -> dict[str, dict[str, Any]]:
    return {j["comment"]: j for j in load(name)["jobs"]}


# comment -> (state, native, exit_code, signal, reason, nodes, has start, has end)
EXPECTED = {
    "hpc-bridge:fx-completed": (BackendState.COMPLETED, "COMPLETED", 0, None, None,
                                ("node1", "node2"), True, True),
    "hpc-bridge:fx-exit3": (BackendState.FAILED, "FAILED", 3, None, "NonZeroExitCode",
                            ("node1",), True, True),
    "hpc-bridge:fx-sigkill": (BackendState.FAILED, "FAILED", 137, 9, "JobLaunchFailure",
                              ("node2",), True, True),
    "hpc-bridge:fx-running": (BackendState.RUNNING, "RUNNING", None, None, None,
                              ("node3",), True, False),
    "hpc-bridge:fx-cancelled": (BackendState.CANCELLED, "CANCELLED", 143, 15, None,
                                ("node3",), True, True),
    "hpc-bridge:fx-timeout": (BackendState.TIMEOUT, "TIMEOUT", 143, 15, "TimeLimit",
                              ("node4",), True, True),
    "hpc-bridge:fx-pending": (BackendState.PENDING, "PENDING", None, None, "PartitionConfig",
                              (), False, False),
    "hpc-bridge:fx-srunfail": (BackendState.FAILED, "FAILED", 1, None, "NonZeroExitCode",
                               ("node2",), True, True),
    "hpc-bridge:fx-completing2": (BackendState.CANCELLED, "CANCELLED", 137, 9, None,
                                  ("node1",), True, True),
}


@pytest.mark.parametrize("fixture", ["v0.0.38_jobs.json", "squeue_22.05_jobs.json"])
@pytest.mark.parametrize("comment", sorted(EXPECTED))
def test_recorded_jobs_map_to_bridge_states(fixture: str, comment: str) -> None:
    raw = jobs_by_comment(fixture)[comment]
    job = job_from_slurm(raw, V0_0_38)
    assert job is not None
    state, native, exit_code, signal, reason, nodes, started, ended = EXPECTED[comment]
    assert job.job_uid == comment.removeprefix("hpc-bridge:")
    assert job.backend_id == str(raw["job_id"])
    assert (job.state, job.native_state, job.exit_code, job.signal) == (
        state, native, exit_code, signal)
    assert job.reason == reason
    assert job.nodes == nodes
    assert (job.start_time is not None, job.end_time is not None) == (started, ended)
    if ended:
        assert job.end_time == float(raw["end_time"])


def test_the_two_sources_agree() -> None:
    assert load("v0.0.38_jobs.json")["jobs"] == load("squeue_22.05_jobs.json")["jobs"]
    meta = load("squeue_22.05_jobs.json")["meta"]
    assert dialect_from_meta(meta) is V0_0_38


def test_raw_exit_codes_are_wait_statuses() -> None:
    """What Slurm 22.05 stores: ``exit 3`` -> 768, SIGKILL -> 9, scancel -> 15."""
    raw = {j["comment"]: j["exit_code"] for j in load("v0.0.38_jobs.json")["jobs"]}
    assert raw["hpc-bridge:fx-exit3"] == 3 << 8
    assert raw["hpc-bridge:fx-sigkill"] == 9
    assert raw["hpc-bridge:fx-cancelled"] == 15
    assert raw["hpc-bridge:fx-srunfail"] == 1 << 8


def test_running_job_end_time_is_a_projection_not_reported() -> None:
    raw = jobs_by_comment("v0.0.38_jobs.json")["hpc-bridge:fx-running"]
    assert raw["end_time"] > raw["start_time"]  # Slurm reports start + time limit
    job = job_from_slurm(raw, V0_0_38)
    assert job is not None and job.end_time is None and job.exit_code is None


def test_completing_job_stays_running_without_an_exit_code() -> None:
    """Caught while COMPLETING after scancel: Slurm still says exit_code 0 (the final
    answer was 9), so no exit code is reported until the job is finished."""
    raw = load("v0.0.38_jobs_completing.json")["jobs"][0]
    assert raw["job_state"] == "COMPLETING" and raw["exit_code"] == 0
    job = job_from_slurm(raw, V0_0_38)
    assert job is not None
    assert job.state is BackendState.RUNNING
    assert job.native_state == "COMPLETING"
    assert job.end_time == float(raw["end_time"])
    assert job.exit_code is None and job.signal is None


def test_other_jobs_are_ignored() -> None:
    others = [j for j in load("v0.0.38_jobs.json")["jobs"]
              if not j["comment"].startswith("hpc-bridge:")]
    assert others
    assert all(job_from_slurm(j, V0_0_38) is None for j in others)
    assert job_from_slurm({"job_id": 1, "comment": "hpc-bridge:"}, V0_0_38) is None


def test_output_paths_are_the_files_slurmd_wrote() -> None:
    """The names below are the files slurmd created on the bed for these jobs."""
    jobs = jobs_by_comment("v0.0.38_jobs.json")
    paths = {c: job_from_slurm(j, V0_0_38) for c, j in jobs.items() if c.startswith("hpc")}
    ok = paths["hpc-bridge:fx-completed"]
    assert ok is not None and ok.stdout_path == ok.stderr_path == "/tmp/sx/fx/fx-fx-ok-63.out"
    running = paths["hpc-bridge:fx-running"]
    assert running is not None
    assert running.stdout_path == "/tmp/sx/fx/run-0066-alice.out"
    assert running.stderr_path == "/tmp/sx/fx/run-66.err"
    array_tasks = [job_from_slurm(j, V0_0_38) for j in load("v0.0.38_jobs.json")["jobs"]
                   if j["comment"] == "hpc-bridge:fx-array"]
    assert sorted(j.stdout_path for j in array_tasks if j and j.stdout_path) == [
        "/tmp/sx/fx/slurm-71_1.out", "/tmp/sx/fx/slurm-71_2.out"]


@pytest.mark.parametrize(
    ("names", "state"),
    [
        (["PENDING"], BackendState.PENDING),
        (["CONFIGURING"], BackendState.PENDING),
        (["REQUEUED"], BackendState.PENDING),
        (["RUNNING", "CONFIGURING"], BackendState.PENDING),
        (["REQUEUE_HOLD"], BackendState.PENDING),
        (["RUNNING"], BackendState.RUNNING),
        (["COMPLETING"], BackendState.RUNNING),
        (["COMPLETED", "COMPLETING"], BackendState.RUNNING),
        (["SUSPENDED"], BackendState.SUSPENDED),
        (["STOPPED"], BackendState.SUSPENDED),
        (["COMPLETED"], BackendState.COMPLETED),
        (["FAILED"], BackendState.FAILED),
        (["NODE_FAIL"], BackendState.FAILED),
        (["OUT_OF_MEMORY"], BackendState.FAILED),
        (["BOOT_FAIL"], BackendState.FAILED),
        (["DEADLINE"], BackendState.FAILED),
        (["PREEMPTED"], BackendState.FAILED),
        (["CANCELLED"], BackendState.CANCELLED),
        (["TIMEOUT"], BackendState.TIMEOUT),
        (["SOMETHING_NEW"], BackendState.UNKNOWN),
        ([], BackendState.UNKNOWN),
    ],
)
def test_state_table(names: list[str], state: BackendState) -> None:
    assert backend_state(names) is state


# --- nodes -----------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["v0.0.38_nodes.json", "sinfo_22.05_nodes.json"])
def test_recorded_nodes(fixture: str) -> None:
    """Recorded while fx-running held a core of node3 and fx-timeout one of node4."""
    nodes = [node_from_slurm(n, V0_0_38) for n in load(fixture)["nodes"]]
    assert [(n.name, n.state, n.free_cpus) for n in nodes] == [
        ("node1", "IDLE", 2), ("node2", "IDLE", 2), ("node3", "MIXED", 1), ("node4", "MIXED", 1)]
    for n in nodes:
        assert (n.cpus, n.memory_mb, n.gpus, n.partitions) == (2, 2000, 0, ("debug",))
        assert n.free_memory_mb == 2000  # CR_Core: memory is not allocated


def test_node_capacity_and_flags() -> None:
    raw = {"name": "g1", "state": "mixed", "state_flags": [], "cpus": 64, "alloc_cpus": 48,
           "real_memory": 512000, "alloc_memory": 128000,
           "gres": "gpu:a100:4(S:0-1),mps:400", "gres_used": "gpu:a100:3(IDX:0-2),mps:0",
           "partitions": ["gpu", "all"], "features": "a100,ib", "active_features": "a100,ib"}
    n = node_from_slurm(raw, V0_0_38)
    assert (n.state, n.cpus, n.free_cpus, n.memory_mb, n.free_memory_mb) == (
        "MIXED", 64, 16, 512000, 384000)
    assert (n.gpus, n.free_gpus, n.partitions, n.features) == (
        4, 1, ("gpu", "all"), ("a100", "ib"))
    drained = node_from_slurm({**raw, "state": "idle", "state_flags": ["DRAIN"]}, V0_0_38)
    assert drained.state == "IDLE+DRAIN"
    assert (drained.free_cpus, drained.free_memory_mb, drained.free_gpus) == (0, 0, 0)


@pytest.mark.parametrize(("gres", "count"), [
    ("", 0), ("gpu:2", 2), ("gpu:a100:4(S:0-1)", 4), ("gpu:a100:2,gpu:v100:1", 3),
    ("mps:100", 0), ("gpu", 1), ("gpu:a100:3(IDX:0,2-3)", 3), ("gpu:0", 0),
])
def test_gpu_count(gres: str, count: int) -> None:
    assert gpu_count(gres) == count


def test_topology_from_scontrol() -> None:
    text = (FIXTURES / "scontrol_show_topology.txt").read_text()
    assert parse_topology(text) == {
        "leaf1": ((), ("node1", "node2")),
        "leaf2": ((), ("node3", "node4")),
        "spine": (("leaf1", "leaf2"), ()),
    }


def test_topology_conf_syntax_and_direct_nodes() -> None:
    text = """# topology.conf
SwitchName=s0 Nodes=n[1-2]
SwitchName=s1 Nodes=n[3-4]
SwitchName=top Switches=s[0-1] Nodes=n[1-5]   # n5 hangs off the top switch
"""
    assert parse_topology(text) == {
        "s0": ((), ("n1", "n2")), "s1": ((), ("n3", "n4")), "top": (("s0", "s1"), ("n5",))}


@pytest.mark.parametrize(("reason", "description", "state"), [
    ("JobHeldUser", "", BackendState.SUSPENDED),  # scontrol hold by its owner
    ("JobHeldUser", "job requeued in held state", BackendState.SUSPENDED),  # requeuehold
    # Slurm's own holds with that reason stay Slurm's (the bridge must not release them)
    ("JobHeldUser", "launch failed requeued held", BackendState.PENDING),
    ("JobHeldAdmin", "", BackendState.PENDING),   # an operator's: not the bridge's to undo
    ("Priority", "", BackendState.PENDING),
])
def test_a_job_its_owner_holds_reads_as_suspended(reason: str, description: str,
                                                  state: BackendState) -> None:
    raw = {"comment": "hpc-bridge:u1", "job_id": 5, "job_state": "PENDING",
           "state_reason": reason, "state_description": description,
           "start_time": 1_900_000_000}  # Slurm's expected start, not a start
    job = job_from_slurm(raw, V0_0_38)
    assert job is not None and job.state is state and job.start_time is None
