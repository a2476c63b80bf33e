#!/bin/bash
# hpc-bridge TrainJob team-a/train uid=00000000-0000-4000-8000-000000000001 runtime=mpi-distributed
hostfile_dir=$(mktemp -d "${TMPDIR:-/tmp}/hpc-bridge.XXXXXXXX") || exit 1
trap 'rm -rf -- "$hostfile_dir"' EXIT
/opt/hpc-bridge/bin/mpi-launch --runtime mpi --mpi openmpi --nproc-per-node 2 --hostfile-dir "$hostfile_dir" -- python3 allreduce.py '$(x)'
