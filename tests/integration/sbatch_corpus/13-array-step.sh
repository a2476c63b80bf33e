#!/bin/bash
# Models an array with a step in its index range (0, 4, 8, 12): each element
# handles a block of four consecutive input files. One-day time limit.
#SBATCH --job-name=blocks
#SBATCH --array=0-15:4
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1500M
#SBATCH --time=1-00:00:00
#SBATCH --output=blocks-%A_%a.out

first=$SLURM_ARRAY_TASK_ID
last=$((first + SLURM_ARRAY_TASK_STEP - 1))

for i in $(seq "$first" "$last"); do
    echo "Processing frame block $i on $(hostname)"
    ./render --threads "$SLURM_CPUS_PER_TASK" --input "scenes/scene_$i.xml" --output "frames/frame_$i.png"
done
