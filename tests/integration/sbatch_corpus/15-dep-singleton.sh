#!/bin/bash
# Models a long campaign submitted as many identical chunks: "singleton" lets
# only one job with this name (per user) run at a time, so chunks go in order.
#SBATCH --job-name=md-campaign
#SBATCH --dependency=singleton
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --mem=1800M
#SBATCH --time=08:00:00
#SBATCH --output=%x-%j.out

# module load gromacs/2023.2

# Continue from the last checkpoint if there is one.
if [ -f state.cpt ]; then
    srun gmx_mpi mdrun -deffnm md -cpi state.cpt -maxh 7.8
else
    srun gmx_mpi mdrun -deffnm md -maxh 7.8
fi
