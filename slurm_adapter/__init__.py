"""Talking to Slurm: slurmrestd (versioned dialects), CLI fallback, hostlists, sbatch scripts."""

from slurm_adapter.settings import SlurmSettings

__all__ = ["SlurmSettings"]
