#!/bin/bash
# Models a frequent surprise: an #SBATCH line placed after the first command
# is ignored by sbatch, so the node count below never takes effect and the
# job runs with the settings from the header only.
#SBATCH --job-name=late-directive
#SBATCH --ntasks=1
#SBATCH --mem=500M
#SBATCH --time=00:10:00
#SBATCH --output=%x-%j.out

echo "Starting at $(date)"

#SBATCH --nodes=16
#SBATCH --time=7-00:00:00

srun ./simulate --steps 1000
