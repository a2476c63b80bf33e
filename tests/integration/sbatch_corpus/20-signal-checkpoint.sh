#!/bin/bash
# Models the "checkpoint before the time limit" recipe: Slurm sends SIGUSR1 to
# the batch shell 60 seconds before the end, the trap writes a checkpoint and
# requeues the job; the log is appended to across restarts.
#SBATCH --job-name=ckpt-train
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1500M
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@60
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out

checkpoint_and_requeue() {
    echo "$(date): caught SIGUSR1, checkpointing"
    kill -USR1 "$train_pid"      # the trainer saves its state on USR1
    wait "$train_pid"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
}
trap checkpoint_and_requeue USR1

echo "$(date): start, restart count ${SLURM_RESTART_COUNT:-0}"
# source ~/venvs/torch/bin/activate
python3 train.py --resume-from checkpoints/last.pt &
train_pid=$!

# Wait in a loop: a trapped signal interrupts "wait", the process keeps going.
while kill -0 "$train_pid" 2>/dev/null; do
    wait "$train_pid"
done
echo "$(date): training finished"
