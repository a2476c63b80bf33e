"""The lines of a batch script that start a job's data cache (bridge/dataset.py,
data_cache/) before its training runs.

Contract: :func:`cache_prologue` returns bash that, run by the batch script on the
first node,

1. makes a private status directory in the job's working directory (``mktemp -d``:
   mode 0700, a fresh unpredictable name; every node sees it, and ``data-cache wait``
   reads only status files of the job's user there, through one open descriptor), and
   the job's credentials (``data-cache credentials``: a random token, a self-signed TLS
   certificate and key), ``eval``'d into ``HPC_BRIDGE_DATA_CACHE_TOKEN``/``_CERT``/
   ``_KEY``: only the job's processes have them, no file ever holds them;
2. starts one ``data-cache serve`` per allocated node as a background step
   (``srun --overlap``: it shares the nodes' CPUs and memory with the training step
   instead of holding them);
3. waits (``data-cache wait --remove``) until every server has loaded its partition and
   serves, and exports the addresses as ``HPC_BRIDGE_DATA_CACHE`` — or stops the
   servers and ends the job with exit status 1 before the training starts; either way
   ``wait`` removes the directory through its descriptor (never ``rm -rf`` by a name
   someone could have pointed elsewhere); the servers' reason for a failure (e.g. the
   dataset path and why it cannot be read, or a partition over the memory limit) is in
   the job's output.

The script's launch line still ``exec``s (signals for the batch shell, ``--signal=B:``,
reach the training); Slurm ends the cache step when the batch step ends. Every value
from the job goes through :func:`shlex.quote`.
"""

from __future__ import annotations

import shlex

from bridge.dataset import DataCacheSpec, serve_options

__all__ = ["cache_prologue"]


def cache_prologue(spec: DataCacheSpec, *, data_cache: str = "data-cache",
                   mem_per_node_mb: int | None = None) -> str:
    """The bash lines that start the cache (see the module docstring)."""
    exe = shlex.quote(data_cache)
    serve = [data_cache, "serve", *serve_options(
        spec, mem_per_node_mb * 2**20 if mem_per_node_mb else None)]
    words = " ".join(shlex.quote(w) for w in serve)
    return (
        "# hpc-bridge data cache: one server per node until the job ends (docs/data-cache.md)\n"
        'hpc_bridge_cache=$(mktemp -d "$PWD/.hpc-bridge-cache-$SLURM_JOB_ID.XXXXXXXX") '
        "|| exit 1\n"
        f"hpc_bridge_cache_credentials=$({exe} credentials) || exit 1\n"
        'eval "$hpc_bridge_cache_credentials"; unset hpc_bridge_cache_credentials\n'
        'srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
        "--ntasks-per-node=1 --cpu-bind=none --kill-on-bad-exit=1 "
        f'{words} --dir "$hpc_bridge_cache" &\n'
        "hpc_bridge_cache_pid=$!\n"
        f'HPC_BRIDGE_DATA_CACHE=$({exe} wait --remove --dir "$hpc_bridge_cache" '
        '--count "$SLURM_JOB_NUM_NODES" --pid "$hpc_bridge_cache_pid") '
        '|| { kill "$hpc_bridge_cache_pid" 2>/dev/null; exit 1; }\n'
        "export HPC_BRIDGE_DATA_CACHE\n"
    )
