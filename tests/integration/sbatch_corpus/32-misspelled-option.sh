#!/bin/bash
# Models a typo in a directive name (an extra letter in --nodes).
#SBATCH --job-name=typo
#SBATCH --nodess=2
#SBATCH --ntasks-per-node=1
#SBATCH --mem=500M
#SBATCH --time=00:10:00
#SBATCH --output=%x-%j.out

srun hostname
