"""Slurm hostlist expressions: :mod:`bridge.hostlist` (one grammar for the daemon and
its adapters; ``mpi_launch`` keeps its own copy because it imports nothing of ours)."""

from bridge.hostlist import HostlistError, compress, expand

__all__ = ["HostlistError", "compress", "expand"]
