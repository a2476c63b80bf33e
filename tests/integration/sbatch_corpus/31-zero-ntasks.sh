#!/bin/bash
# Models a templating bug: the task count was filled in from an empty
# variable and became zero.
#SBATCH --job-name=zero-tasks
#SBATCH --ntasks=0
#SBATCH --mem=500M
#SBATCH --time=00:10:00
#SBATCH --output=%x-%j.out

srun ./worker
