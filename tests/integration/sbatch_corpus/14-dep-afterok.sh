#!/bin/bash
# Models a post-processing stage chained after a simulation job: it may start
# only when that job finished successfully, and should be cancelled rather than
# left pending forever if the dependency can never be satisfied.
#SBATCH --job-name=postprocess
#SBATCH --dependency=afterok:999999
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --ntasks=1
#SBATCH --mem=1G
#SBATCH --time=00:30:00
#SBATCH --output=post-%j.out

# The simulation (job 999999) wrote its results under run-999999/.
# module load python/3.11
python3 collect_results.py --run-dir run-999999 --plot summary.png
