"""Golden files: every hostfile flavour and every runtime's environment and argv, fed from
a Slurm environment, a Flux R (RFC 20) and a JobSet pod.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 .venv/bin/pytest
tests/unit/test_mpi_launch_golden.py`` and review the diff.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mpi_launch.allocation import Allocation, from_flux_r, from_jobset_env, from_slurm_env
from mpi_launch.hostfile import FLAVOURS, hostfile_env, render_hostfile
from mpi_launch.plan import LaunchOptions, describe, plan_launch

GOLDEN = Path(__file__).parent / "golden" / "mpi_launch"
HOSTFILE_DIR = "/run/mpi-launch/job"
COMMAND = ("python3", "train.py", "--epochs", "2")

# Slurm: a batch script (node rank 0, where MPI's launcher runs) and a task of an
# `srun --ntasks-per-node=4` step on the second node (per-rank runtimes).
SLURM_BATCH = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]",
               "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_CPUS_PER_NODE": "72(x2)",
               "SLURM_GPUS_PER_NODE": "h100:4", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
               "SLURM_LOCALID": "0"}
SLURM_TASK = {**SLURM_BATCH, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "gpu[07-08]",
              "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_NODEID": "1", "SLURM_PROCID": "5",
              "SLURM_LOCALID": "1"}
# Uneven nodes, in the N(xM) form: the hostfiles must carry per-host counts.
SLURM_UNEVEN = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[01-03]",
                "SLURM_JOB_CPUS_PER_NODE": "72(x2),36"}
# Flux: RFC 20's example R (ranks 19-22 on node[186-189], 48 cores and 8 GPUs each).
FLUX_R: dict[str, Any] = {
    "version": 1,
    "execution": {"R_lite": [{"rank": "19-22", "children": {"core": "0-47", "gpu": "0-7"}}],
                  "nodelist": ["node[186-189]"], "nslots": 32,
                  "starttime": 1676560542, "expiration": 1676562342},
}
# JobSet pod of TrainJob "llama" (Kubeflow Trainer layout), 2 node pods x 4 GPUs.
JOBSET_POD0 = {"JOB_COMPLETION_INDEX": "0", "JOBSET_NAME": "llama", "PET_NNODES": "2",
               "PET_NPROC_PER_NODE": "4", "JOBSET_GPUS_PER_NODE": "4"}
JOBSET_POD1 = {**JOBSET_POD0, "JOB_COMPLETION_INDEX": "1"}

Reader = Callable[[], Allocation]
WORLDS: dict[str, tuple[Reader, Reader]] = {
    # world: (allocation as the first node sees it, as a later rank sees it)
    "slurm": (lambda: from_slurm_env(SLURM_BATCH), lambda: from_slurm_env(SLURM_TASK)),
    "flux": (lambda: from_flux_r(FLUX_R, job_id="f2oLkTLb", hostname="node186"),
             lambda: from_flux_r(FLUX_R, job_id="f2oLkTLb", hostname="node188",
                                 proc_rank=17, local_rank=1)),
    "jobset": (lambda: from_jobset_env(JOBSET_POD0), lambda: from_jobset_env(JOBSET_POD1)),
}
HOSTFILE_INPUTS: dict[str, Reader] = {
    "slurm": WORLDS["slurm"][0], "slurm-uneven": lambda: from_slurm_env(SLURM_UNEVEN),
    "flux": WORLDS["flux"][0], "jobset": WORLDS["jobset"][0],
}
# runtime case: (LaunchOptions keywords, use the first node's view?)
RUNTIME_CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "mpi-openmpi": ({"runtime": "mpi", "mpi": "openmpi"}, True),
    "mpi-mpich": ({"runtime": "mpi", "mpi": "mpich"}, True),
    "mpi-intel": ({"runtime": "mpi", "mpi": "intel"}, True),
    "mpi-openmpi-rank1": ({"runtime": "mpi", "mpi": "openmpi"}, False),
    "torch": ({"runtime": "torch"}, False),
    "torch-nproc2": ({"runtime": "torch", "nproc_per_node": 2}, False),
    "torch-direct": ({"runtime": "torch", "direct": True}, False),
    "jax": ({"runtime": "jax"}, False),
    "xgboost": ({"runtime": "xgboost"}, False),
    "plain": ({"runtime": "plain"}, False),
}
# Per-rank runtimes on a JobSet run one process per pod (as Trainer's JAX/XGBoost do).
JOBSET_ONE_PER_POD = {"torch-direct", "jax", "xgboost"}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{path} differs (UPDATE_GOLDEN=1 regenerates)"


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("world", sorted(HOSTFILE_INPUTS))
def test_hostfile_golden(world: str, flavour: str) -> None:
    hosts = HOSTFILE_INPUTS[world]().hosts
    text = render_hostfile(flavour, hosts)
    env = hostfile_env(flavour, f"{HOSTFILE_DIR}/hostfile.{flavour}", hosts)
    block = text + "# environment\n" + "".join(f"{k}={v}\n" for k, v in sorted(env.items()))
    check_golden(f"hostfile/{world}.{flavour}", block)


@pytest.mark.parametrize("case", sorted(RUNTIME_CASES))
@pytest.mark.parametrize("world", sorted(WORLDS))
def test_runtime_environment_golden(world: str, case: str) -> None:
    keywords, first_node = RUNTIME_CASES[case]
    alloc = WORLDS[world][0 if first_node else 1]()
    if world == "jobset" and case in JOBSET_ONE_PER_POD:
        keywords = {**keywords, "nproc_per_node": 1}
    plan = plan_launch(alloc, LaunchOptions(command=COMMAND, **keywords), HOSTFILE_DIR)
    check_golden(f"env/{world}-{case}.txt", describe(alloc, plan))


def test_no_stray_golden_files() -> None:
    expected = {f"hostfile/{w}.{f}" for w in HOSTFILE_INPUTS for f in FLAVOURS}
    expected |= {f"env/{w}-{c}.txt" for w in WORLDS for c in RUNTIME_CASES}
    found = {str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file()}
    assert found == expected
