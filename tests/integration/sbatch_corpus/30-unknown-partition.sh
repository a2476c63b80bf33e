#!/bin/bash
# Models a script copied from another centre that names a partition this
# cluster does not have (short -p form).
#SBATCH -J copied-from-elsewhere
#SBATCH -p gpu-large
#SBATCH -N 1
#SBATCH -n 2
#SBATCH -t 12:00:00
#SBATCH -o %x-%j.out

# module load cuda/11.8
srun python3 train.py --config big.yaml
