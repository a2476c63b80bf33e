#!/bin/bash
# Models launching DeepSpeed with its own launcher: the script turns the Slurm
# node list into a hostfile ("host slots=N") and lets deepspeed ssh out.
#SBATCH --job-name=ds-finetune
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=2
#SBATCH --time=0-12:00:00
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err

# module load cuda/12.1 nccl
# conda activate deepspeed

GPUS_PER_NODE=2
hostfile=hostfile-$SLURM_JOB_ID
for host in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    echo "$host slots=$GPUS_PER_NODE"
done > "$hostfile"
cat "$hostfile"

master=$(head -n 1 "$hostfile" | cut -d' ' -f1)

deepspeed --hostfile "$hostfile" \
    --master_addr "$master" --master_port 29600 \
    finetune.py \
    --deepspeed --deepspeed_config ds_zero2.json \
    --model_name_or_path ./checkpoints/base \
    --output_dir ./checkpoints/ft-$SLURM_JOB_ID

rm -f "$hostfile"
