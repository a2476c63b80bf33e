#!/bin/bash
# Models a pure MPI job built against Open MPI and started directly with srun
# (PMIx), filling every core of four nodes. Time limit uses the days-hours form.
#SBATCH --job-name=heat2d
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=400M
#SBATCH --time=0-2
#SBATCH --output=heat2d.%j.out

# module purge
# module load gcc/12.2.0 openmpi/4.1.5

# Keep Open MPI from trying fabrics it cannot use on this cluster.
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=eth0

echo "Running $SLURM_NTASKS ranks on: $SLURM_JOB_NODELIST"
srun --mpi=pmix ./heat2d -nx 4096 -ny 4096 -steps 5000
