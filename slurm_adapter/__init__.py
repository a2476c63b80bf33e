"""Talking to Slurm: slurmrestd (versioned dialects), CLI fallback, hostlists, sbatch scripts."""
