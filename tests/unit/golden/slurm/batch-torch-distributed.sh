#!/bin/bash
# hpc-bridge TrainJob team-a/train uid=00000000-0000-4000-8000-000000000001 runtime=torch-distributed
user_script=$(mktemp "$PWD/.hpc-bridge-$SLURM_JOB_ID.XXXXXXXX") || exit 1
trap 'rm -rf -- "$user_script"' EXIT
cat > "$user_script" <<'HPC_BRIDGE_SCRIPT_d0442d9a058598d4' || exit 1
#!/bin/bash
#SBATCH -N 2
echo "$(touch /tmp/should-not-run-at-render) `id` $HOME"
EOF
HPC_BRIDGE_SCRIPT_x
mpirun python3 allreduce.py "$@"
HPC_BRIDGE_SCRIPT_d0442d9a058598d4
chmod 700 "$user_script" || exit 1
srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpu-bind=none --kill-on-bad-exit=1 /opt/hpc-bridge/bin/mpi-launch --runtime torch --nproc-per-node 2 --launcher none -- "$user_script" one 'two words' '$(x)'
