#!/bin/sh
# Models a user mistake: a time limit that is not a time at all.
#SBATCH --job-name=bad-time
#SBATCH --ntasks=1
#SBATCH --mem=500M
#SBATCH --time=abc
#SBATCH --output=%x-%j.out

./run_model --config model.yaml
