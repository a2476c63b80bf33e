#!/bin/bash
# Models naming output files with filename patterns (job name, job id, user,
# node) and running from an explicit working directory.
#SBATCH --job-name=patterns
#SBATCH --chdir=/tmp
#SBATCH --output=%x-%u-%j.out
#SBATCH --error=%x-%N-%j.err
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --mem=200M
#SBATCH --time=05:00

echo "Working directory: $(pwd)"
echo "User $USER, job $SLURM_JOB_ID ($SLURM_JOB_NAME) on $SLURMD_NODENAME"
ls -la
