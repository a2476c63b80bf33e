#!/bin/bash
##SBATCH --runtime=torch-distributed
##SBATCH -N 2
# a comment
   #SBATCH --indented-is-a-comment
##SBATCH --already-disabled

##SBATCH --time=10
srun hostname
#SBATCH --after-the-first-command-is-not-a-directive
