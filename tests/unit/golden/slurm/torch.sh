#!/bin/bash
# hpc-bridge TrainJob team-a/train uid=00000000-0000-4000-8000-000000000001 runtime=torch-distributed
exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpu-bind=none --kill-on-bad-exit=1 /opt/hpc-bridge/bin/mpi-launch --runtime torch --nproc-per-node 4 -- torchrun --nnodes=2 --nproc-per-node=4 train.py --epochs 3 --lr=0.1
