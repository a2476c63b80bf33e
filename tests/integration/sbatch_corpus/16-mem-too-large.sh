#!/bin/bash
# Models a user who asks for more memory per node than the nodes have
# (a common mistake when copying a script from a bigger cluster).
#SBATCH --job-name=bigmem
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=2G
#SBATCH --time=03:00:00
#SBATCH --output=bigmem-%j.out

# module load R/4.3.1
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
Rscript assemble_matrix.R --input counts/ --output matrix.rds
