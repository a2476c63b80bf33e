#!/bin/bash

# Models a script whose header starts with a blank line and a block of
# comments before the first directive; sbatch keeps reading #SBATCH lines
# until the first command, so all of these still count.
#
# Author: lab wiki, "template for the small cluster"
# Last change: ask for 2 nodes instead of 1.

#SBATCH --job-name=after-blank

#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
# memory is per node here
#SBATCH --mem=1000M
#SBATCH --time=00:40:00

#SBATCH --output=%x-%j.out

srun hostname | sort | uniq -c
srun ./mpi_pi --intervals 100000000
