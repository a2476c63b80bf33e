"""The lines of a batch script that start a job's data cache (bridge/dataset.py,
data_cache/) before its training runs.

Contract: :func:`cache_prologue` returns bash that, run by the batch script on the
first node,

1. makes a private status directory in the job's working directory (``mktemp -d``:
   mode 0700, a fresh unpredictable name, so every node sees it and no other user can
   plant or read anything there) and a fresh random token
   (``HPC_BRIDGE_DATA_CACHE_TOKEN``, exported: only the job's processes have it);
2. starts one ``data-cache serve`` per allocated node as a background step
   (``srun --overlap``: it shares the nodes' CPUs and memory with the training step
   instead of holding them);
3. waits (``data-cache wait``) until every server has loaded its partition and serves,
   and exports their addresses as ``HPC_BRIDGE_DATA_CACHE`` — or ends the job with
   exit status 1 before the training starts, the servers' reason (e.g. the dataset path
   and why it cannot be read, or a partition over the memory limit) in its output;
4. on exit (``trap ... EXIT``) stops the servers and removes the directory.

:data:`STOP` is the function the script's other ``EXIT`` traps must call first
(bash keeps one trap per signal). Every value from the job goes through
:func:`shlex.quote`.
"""

from __future__ import annotations

import shlex

from bridge.dataset import DataCacheSpec

__all__ = ["STOP", "cache_prologue"]

#: The bash function that stops the cache and removes its directory.
STOP = "hpc_bridge_cache_stop"


def cache_prologue(spec: DataCacheSpec, *, data_cache: str = "data-cache",
                   mem_per_node_mb: int | None = None) -> str:
    """The bash lines that start the cache (see the module docstring)."""
    exe = shlex.quote(data_cache)
    serve = [data_cache, "serve", "--source", spec.source]
    if spec.fmt:
        serve += ["--format", spec.fmt]
    if spec.block_rows:
        serve += ["--block-rows", str(spec.block_rows)]
    limit = spec.memory_bytes or (mem_per_node_mb * 2**20 if mem_per_node_mb else None)
    if limit:
        serve += ["--memory-limit", str(limit)]
    words = " ".join(shlex.quote(w) for w in serve)
    return (
        "# hpc-bridge data cache: one server per node until the job ends (docs/data-cache.md)\n"
        'hpc_bridge_cache=$(mktemp -d "$PWD/.hpc-bridge-cache-$SLURM_JOB_ID.XXXXXXXX") '
        "|| exit 1\n"
        "HPC_BRIDGE_DATA_CACHE_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n') "
        "|| exit 1\n"
        "export HPC_BRIDGE_DATA_CACHE_TOKEN\n"
        'srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
        "--ntasks-per-node=1 --cpu-bind=none --kill-on-bad-exit=1 "
        f'{words} --dir "$hpc_bridge_cache" &\n'
        "hpc_bridge_cache_pid=$!\n"
        f"{STOP}() {{ kill \"$hpc_bridge_cache_pid\" 2>/dev/null; "
        "wait \"$hpc_bridge_cache_pid\" 2>/dev/null; rm -rf -- \"$hpc_bridge_cache\"; }\n"
        f"trap {STOP} EXIT\n"
        f'HPC_BRIDGE_DATA_CACHE=$({exe} wait --dir "$hpc_bridge_cache" '
        '--count "$SLURM_JOB_NUM_NODES" --pid "$hpc_bridge_cache_pid") || exit 1\n'
        "export HPC_BRIDGE_DATA_CACHE\n"
    )
