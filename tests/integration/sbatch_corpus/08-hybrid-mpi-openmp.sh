#!/bin/bash
# Models the hybrid MPI + OpenMP recipe: one rank per node, each rank using all
# cores of its node through OpenMP threads, hyper-threads disabled.
#SBATCH --job-name=hybrid
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --hint=nomultithread
#SBATCH --time=00:45:00
#SBATCH --output=hybrid-%j.out

# module load gcc/12.2.0 openmpi/4.1.5

export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
export OMP_PLACES=cores
export OMP_PROC_BIND=close

echo "$SLURM_NTASKS ranks x $OMP_NUM_THREADS threads"
# srun does not pass --cpus-per-task on to the step by itself since 22.05,
# so hand it over explicitly.
srun --cpus-per-task="$SLURM_CPUS_PER_TASK" ./stencil_hybrid --size 8192 --iters 200
