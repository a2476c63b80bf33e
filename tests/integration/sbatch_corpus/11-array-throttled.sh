#!/bin/bash
# Models a parameter sweep as a job array of 32 elements of which at most four
# run at once, each writing its own log named after the array and task ids.
#SBATCH --job-name=sweep
#SBATCH --array=0-31%4
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=500M
#SBATCH --time=00:15:00
#SBATCH --output=logs/sweep_%A_%a.out
#SBATCH --error=logs/sweep_%A_%a.err

# module load python/3.11

# Pick this element's learning rate from a list, one value per line.
lr=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" learning_rates.txt)
echo "Array job $SLURM_ARRAY_JOB_ID, task $SLURM_ARRAY_TASK_ID: lr=$lr"

python3 fit.py --lr "$lr" --seed "$SLURM_ARRAY_TASK_ID" --out results/run_${SLURM_ARRAY_TASK_ID}.json
