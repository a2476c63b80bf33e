"""sbatch's GPU options as GPUs per node (bridge/gpu_options.py): honoured on Kubernetes
and Flux where they come to a whole count per node, passed to Slurm as they are."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.gpu_options import from_gpu_options, gpus_per_node
from bridge.option_support import AdmitContext, refusals
from bridge.scheduling import SchedulingOptions
from flux_adapter.jobspec import build_jobspec
from flux_adapter.options import SUPPORT as FLUX
from k8s_adapter.options import SUPPORT as K8S
from k8s_adapter.pod_resources import container_resources
from slurm_adapter.script import job_spec, sbatch_args
from tests.unit.builders import submit_request, trainjob


@pytest.mark.parametrize(("options", "nodes", "tasks", "count"), [
    ({}, 2, 1, None),
    ({"gres": "gpu:2"}, 2, 1, 2),
    ({"gres": "gpu"}, 2, 1, 1),
    ({"gpus": "8"}, 4, 1, 2),
    ({"gpus_per_task": "2"}, 1, 4, 8),
    ({"gpus_per_node": 2, "gres": "gpu:2", "gpus": "4"}, 2, 1, 2),
])
def test_the_count_per_node(options: dict[str, Any], nodes: int, tasks: int,
                            count: int | None) -> None:
    assert gpus_per_node(SchedulingOptions(**options), nodes, tasks) == count


@pytest.mark.parametrize(("options", "nodes", "why"), [
    ({"gpus": "3"}, 2, "--gpus=3 does not divide evenly over 2 nodes"),
    ({"gres": "gpu:a100:2"}, 1, "names a GPU type ('a100')"),
    ({"gpus": "a100:2"}, 1, "names a GPU type ('a100')"),
    ({"gres": "gpu:1,nvme:1"}, 1, "--gres names 'nvme'"),
    ({"gpus_per_node": 1, "gres": "gpu:2"}, 1, "ask for different GPUs per node "
                                             "(--gpus-per-node: 1, --gres: 2)"),
])
def test_what_has_no_count_per_node_is_refused_naming_it(
        options: dict[str, Any], nodes: int, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        gpus_per_node(SchedulingOptions(**options), nodes, 1)
    ctx = AdmitContext(nodes=nodes)
    for name, table in (("kubernetes", K8S), ("flux", FLUX)):
        found = refusals(SchedulingOptions(**options), table, name, ctx)
        assert any(why in line and f"back end {name!r}" in line for line in found), found


@given(st.integers(1, 16), st.integers(1, 8), st.integers(1, 8))
def test_every_way_of_asking_for_the_same_gpus_agrees(per_node: int, nodes: int,
                                                      tasks: int) -> None:
    asked = SchedulingOptions(gpus_per_node=per_node * tasks, gres=f"gpu:{per_node * tasks}",
                              gpus=str(per_node * tasks * nodes),
                              gpus_per_task=str(per_node))
    assert gpus_per_node(asked, nodes, tasks) == per_node * tasks


def test_the_gpus_reach_a_pod_and_a_flux_slot_but_slurm_gets_only_the_options() -> None:
    job = trainjob("torch-distributed", nodes=2, command=["torchrun", "t.py"])
    options = SchedulingOptions(gres="gpu:2")
    request = submit_request(job, options)
    assert request.job_shape.gpus_per_node == 2
    resources = container_resources(request)
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"][
        "nvidia.com/gpu"] == "2"
    js = build_jobspec(request, default_cwd="/home/alice", mpi_launch="mpi-launch")
    slot = js["resources"][0]["with"][0]
    assert {"type": "gpu", "count": 2} in slot["with"], slot
    spec = job_spec(request, default_chdir="/home/alice")
    assert spec.gpus_per_node is None  # Slurm has --gres=gpu:2 itself
    args = sbatch_args(spec)
    assert "--gres=gpu:2" in args and not any(a.startswith("--gpus-per-node") for a in args)
    explicit = job_spec(submit_request(job, SchedulingOptions(gpus_per_node=2)),
                        default_chdir="/home/alice")
    assert explicit.gpus_per_node == 2
    assert from_gpu_options(SchedulingOptions(gres="gpu:a100:2"), 2, 1) is None


@pytest.mark.parametrize(("gres", "why"), [
    ("gpu:-1", "not NAME[:TYPE][:COUNT]"), ("gpu:+3", "not NAME[:TYPE][:COUNT]"),
    ("gpu:1_0", "not NAME[:TYPE][:COUNT]"), ("gpu:\u0661", "not NAME[:TYPE][:COUNT]"),
    ("gpu:" + "9" * 1000, "not NAME[:TYPE][:COUNT]"), ("gpu:1(S:0)", "not NAME[:TYPE]"),
    ("gpu:2,gpu:4", "names gpu twice"), ("gpu:x", "names a GPU type ('x')"),
])
def test_a_gres_that_is_no_count_of_gpus_is_refused(gres: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        gpus_per_node(SchedulingOptions(gres=gres), 1, 1)


def test_one_refusal_for_gpu_options_that_disagree_and_the_runtimes_ranks_count() -> None:
    """Refused once (under the first GPU option set), and ``--gpus-per-task`` counts the
    ranks the shape counts (a torch runtime's four processes a node)."""
    options = SchedulingOptions(gres="gpu:1", gpus="4", gpus_per_task="3")
    found = refusals(options, K8S, "kubernetes", AdmitContext(nodes=2))
    assert len(found) == 1 and found[0].startswith("--gres is not supported"), found
    four = SchedulingOptions(gpus_per_node=4, gpus_per_task="1")
    assert refusals(four, K8S, "kubernetes", AdmitContext(tasks_per_node=4)) == []
    with pytest.raises(ValueError, match="the nodes would run different numbers of tasks"):
        gpus_per_node(SchedulingOptions(gpus_per_task="1", ntasks=3), 2, 2)
