#!/bin/bash
# Models the "total GPUs for the job" style of request, with CPUs and memory
# scaled per GPU instead of per node or per task.
#SBATCH --job-name=llm-eval
#SBATCH --gpus=4
#SBATCH --cpus-per-gpu=2
#SBATCH --mem-per-gpu=8G
#SBATCH --ntasks=4
#SBATCH --time=06:00:00
#SBATCH --output=%x-%j.out

# module load cuda/12.1
# source ~/venvs/vllm/bin/activate

nvidia-smi --query-gpu=index,name,memory.total --format=csv
python3 evaluate.py \
    --model ./checkpoints/latest \
    --tensor-parallel-size "$SLURM_GPUS" \
    --tasks hellaswag,arc_easy
