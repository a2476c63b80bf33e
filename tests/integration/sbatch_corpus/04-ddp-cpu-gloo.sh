#!/bin/bash
# Models the CPU-only variant of the DDP example (gloo backend), which centres
# offer for debugging distributed code on ordinary compute nodes.
#SBATCH --job-name=ddp-cpu-debug
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1500M
#SBATCH --time=00:20:00
#SBATCH --output=%x-%j.log

# source ~/venvs/torch-cpu/bin/activate

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK

srun --kill-on-bad-exit=1 torchrun \
    --nnodes="$SLURM_NNODES" \
    --nproc_per_node=1 \
    --node_rank="$SLURM_NODEID" \
    --master_addr="$MASTER_ADDR" \
    --master_port="$MASTER_PORT" \
    toy_ddp.py --backend gloo --steps 200
