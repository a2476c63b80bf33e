#!/bin/bash
# Models a small multi-task job that sizes memory per CPU instead of per node,
# as shown in most "how much memory should I ask for" FAQ entries.
#SBATCH --job-name=memtest
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=500M
#SBATCH --time=1:00:00
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err

# module purge
# module load gcc/12.2.0

echo "Tasks: $SLURM_NTASKS, memory per CPU: ${SLURM_MEM_PER_CPU} MB"

# Each task runs its own copy of the analysis on a different input chunk.
srun --ntasks=2 bash -c 'echo "task $SLURM_PROCID on $(hostname)"; ./analyse --chunk "$SLURM_PROCID"'
