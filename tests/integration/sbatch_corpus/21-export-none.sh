#!/bin/bash
# Models a centre's advice to start from a clean environment: nothing from the
# login shell is carried over, so the script sets up modules itself.
#SBATCH --job-name=clean-env
#SBATCH --export=NONE
#SBATCH --ntasks=2
#SBATCH --nodes=1
#SBATCH --mem-per-cpu=500M
#SBATCH --time=00:30:00
#SBATCH --output=clean-env-%j.out

# Nothing is inherited, so read the system profile by hand; on many sites the
# "module" command does not exist until this has been done.
# source /etc/profile
# module purge
# module load gcc/12.2.0 openmpi/4.1.5

# Steps must get the job's environment back explicitly.
export SLURM_EXPORT_ENV=ALL
srun ./ring_test
