#!/bin/bash
# An ordinary Slurm job script: the same #SBATCH lines run with sbatch or tbatch.
#SBATCH --job-name=hello-2node
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
#SBATCH --output=%x-%j.out

echo "job $SLURM_JOB_ID as $(id -un) on $SLURM_JOB_NUM_NODES nodes: $SLURM_JOB_NODELIST"
srun bash -c 'echo "  rank $SLURM_PROCID of $SLURM_NTASKS on $(hostname)"' | sort
echo "arguments: $*"
