#!/bin/bash
# Models the multi-node PyTorch DistributedDataParallel template: one srun task
# per node, each starting torchrun, which spawns one worker per local GPU.
#SBATCH --job-name=ddp-resnet
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1800M
#SBATCH --time=02:00:00
#SBATCH --output=logs/%x-%j.out

# module load cuda/12.1
# source ~/venvs/torch/bin/activate

# The first node of the allocation hosts the rendezvous.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
export MASTER_PORT=29500
export NCCL_DEBUG=WARN
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK

echo "Rendezvous at $head_node_ip:$MASTER_PORT across $SLURM_NNODES nodes"

srun torchrun \
    --nnodes "$SLURM_NNODES" \
    --nproc_per_node "$SLURM_GPUS_ON_NODE" \
    --rdzv_id "$SLURM_JOB_ID" \
    --rdzv_backend c10d \
    --rdzv_endpoint "$head_node_ip:$MASTER_PORT" \
    train.py --epochs 90 --batch-size 256 --data /scratch/$USER/imagenet
