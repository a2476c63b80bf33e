"""Rank environment per runtime, named as Kubeflow Trainer names it.

Every function is pure: allocation (and ranks) in, ``{name: value}`` out.

The rendezvous port (torch master, JAX coordinator, XGBoost tracker) follows
:func:`master_port`: the first port of ``SLURM_STEP_RESV_PORTS`` when Slurm reserved
ports for the step; otherwise ``20000 + sha256(job id[.step]) mod 12768``, a port in
20000-32767 that every node computes alike without talking, and that differs between
two jobs (or two steps of one job) sharing a node except by a 1-in-12768 chance. The
range stays below Linux's default ephemeral ports (``ip_local_port_range`` 32768-60999):
a port in that range may be the local end of any outgoing connection on the node (the
ranks' own gloo mesh among them), and the rendezvous store then fails with
``EADDRINUSE``, as seen on the test bed. ``--master-port`` overrides it.
"""

from __future__ import annotations

import hashlib

from mpi_launch.allocation import Allocation
from mpi_launch.hostlist import compress

__all__ = [
    "PORT_RANGE",
    "common_env",
    "jax_env",
    "master_port",
    "torch_node_env",
    "torch_rank_env",
    "xgboost_env",
]

PORT_RANGE = (20000, 32767)
"""Inclusive bounds of the derived rendezvous port."""


def master_port(alloc: Allocation) -> int:
    """The rendezvous port of this job (step): see the module docstring for the rule."""
    if alloc.resv_ports:
        return alloc.resv_ports[0]
    key = alloc.job_id if alloc.step is None else f"{alloc.job_id}.{alloc.step}"
    digest = hashlib.sha256(key.encode()).digest()
    low, high = PORT_RANGE
    return low + int.from_bytes(digest[:8], "big") % (high - low + 1)


def common_env(alloc: Allocation) -> dict[str, str]:
    """What every runtime gets: the world, job, node list and this node's rank."""
    return {
        "MPI_LAUNCH_WORLD": alloc.world,
        "MPI_LAUNCH_JOB_ID": alloc.job_id,
        "MPI_LAUNCH_NODELIST": compress(alloc.names),
        "MPI_LAUNCH_NNODES": str(len(alloc.hosts)),
        "MPI_LAUNCH_NODE_RANK": str(alloc.node_rank),
    }


def torch_node_env(alloc: Allocation, nproc_per_node: int, port: int) -> dict[str, str]:
    """torchrun's ``PET_*`` (one torchrun per node), as Trainer sets them."""
    return {
        "PET_NNODES": str(len(alloc.hosts)),
        "PET_NPROC_PER_NODE": str(nproc_per_node),
        "PET_NODE_RANK": str(alloc.node_rank),
        "PET_MASTER_ADDR": alloc.hosts[0].name,
        "PET_MASTER_PORT": str(port),
    }


def torch_rank_env(alloc: Allocation, rank: int, local_rank: int, port: int) -> dict[str, str]:
    """What torchrun would give one worker, for ranks started directly (``--direct``).

    World size is the allocation's total slots; ``LOCAL_WORLD_SIZE`` this node's slots.
    """
    return {
        "MASTER_ADDR": alloc.hosts[0].name,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(alloc.total_slots),
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(alloc.this_host.slots),
        "GROUP_RANK": str(alloc.node_rank),
    }


def jax_env(alloc: Allocation, rank: int, port: int) -> dict[str, str]:
    """``jax.distributed.initialize()`` inputs, one JAX process per slot."""
    return {
        "JAX_NUM_PROCESSES": str(alloc.total_slots),
        "JAX_PROCESS_ID": str(rank),
        "JAX_COORDINATOR_ADDRESS": f"{alloc.hosts[0].name}:{port}",
        "JAX_COORDINATOR_PORT": str(port),
    }


def xgboost_env(alloc: Allocation, rank: int, port: int) -> dict[str, str]:
    """Rabit/collective worker inputs; rank 0's host runs the tracker on the port."""
    return {
        "DMLC_TRACKER_URI": alloc.hosts[0].name,
        "DMLC_TRACKER_PORT": str(port),
        "DMLC_TASK_ID": str(rank),
        "DMLC_NUM_WORKER": str(alloc.total_slots),
    }
