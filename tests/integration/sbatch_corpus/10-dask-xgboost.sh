#!/bin/bash
# Models a Dask cluster inside one allocation (scheduler + workers via srun)
# used for distributed XGBoost training; the node count is left as a range.
#SBATCH --job-name=dask-xgb
#SBATCH --nodes=1-2
#SBATCH --ntasks=3
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=600M
#SBATCH --time=01:00:00
#SBATCH --output=dask-xgb-%j.out

# conda activate dask-ml

sched_file=$PWD/scheduler-$SLURM_JOB_ID.json

# Scheduler on the first task, workers on the rest.
srun --ntasks=1 --nodes=1 dask scheduler --scheduler-file "$sched_file" &
sleep 5
srun --ntasks=$((SLURM_NTASKS - 1)) dask worker \
    --scheduler-file "$sched_file" \
    --nthreads "$SLURM_CPUS_PER_TASK" \
    --memory-limit 550MB &
sleep 10

python3 train_xgb.py --scheduler-file "$sched_file" --rounds 500
kill %1 %2
rm -f "$sched_file"
