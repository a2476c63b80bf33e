#!/bin/bash
# Models a JAX multi-process run: one process per GPU, each calling
# jax.distributed.initialize(), which picks up the Slurm environment itself.
#SBATCH --job-name=jax-mp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=2
#SBATCH --time=01:30:00
#SBATCH --output=%x-%j.out

# module load cuda/12.2 cudnn
# source ~/venvs/jax/bin/activate

export XLA_PYTHON_CLIENT_PREALLOCATE=false
export JAX_COORDINATOR_PORT=12345

srun python3 -u train_flax.py \
    --config configs/vit_small.py \
    --workdir ./runs/$SLURM_JOB_ID
