#!/bin/bash
# Models the first "hello world" serial job from a centre's quick-start page:
# one task, a short limit given in plain minutes, a modest memory request.
#SBATCH --job-name=hello
#SBATCH --time=30
#SBATCH --ntasks=1
#SBATCH --mem=1G
#SBATCH --output=hello-%j.out

# Print a few facts about where the job landed.
echo "Job $SLURM_JOB_ID running on $(hostname) at $(date)"
echo "Submitted from: $SLURM_SUBMIT_DIR"

# module load python/3.11
python3 -c 'import platform; print("Python", platform.python_version())'

sleep 10
echo "Done at $(date)"
