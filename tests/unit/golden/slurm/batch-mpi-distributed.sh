#!/bin/bash
# hpc-bridge TrainJob team-a/train uid=00000000-0000-4000-8000-000000000001 runtime=mpi-distributed
user_script=$(mktemp "$PWD/.hpc-bridge-$SLURM_JOB_ID.XXXXXXXX") || exit 1
hostfile_dir=$(mktemp -d "${TMPDIR:-/tmp}/hpc-bridge.XXXXXXXX") || exit 1
trap 'rm -rf -- "$user_script" "$hostfile_dir"' EXIT
cat > "$user_script" <<'HPC_BRIDGE_SCRIPT_d0442d9a058598d4' || exit 1
#!/bin/bash
#SBATCH -N 2
echo "$(touch /tmp/should-not-run-at-render) `id` $HOME"
EOF
HPC_BRIDGE_SCRIPT_x
mpirun python3 allreduce.py "$@"
HPC_BRIDGE_SCRIPT_d0442d9a058598d4
chmod 700 "$user_script" || exit 1
/opt/hpc-bridge/bin/mpi-launch --runtime mpi --mpi openmpi --nproc-per-node 2 --launcher none --hostfile-dir "$hostfile_dir" -- "$user_script" one 'two words' '$(x)'
