#!/bin/bash
# Models bookkeeping options: a free-text comment shown by squeue/sacct and a
# workload characterisation key for project reporting.
#SBATCH --job-name=bookkeeping
#SBATCH --comment="paper revision 2, figure 4"
#SBATCH --wckey=projX
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --mem=1G
#SBATCH --time=01:00:00
#SBATCH --output=%x-%j.out

# module load python/3.11
python3 make_figure.py --figure 4 --out figures/fig4.pdf
