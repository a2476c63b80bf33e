#!/bin/bash
# Models an Intel MPI job started with mpirun inside the allocation, with the
# I_MPI_* settings that Intel-toolchain pages tell users to export.
#SBATCH --job-name=vasp-like
#SBATCH --ntasks=8
#SBATCH --ntasks-per-node=2
#SBATCH --exclusive
#SBATCH --time=04:00:00
#SBATCH --output=%x.o%j
#SBATCH --error=%x.e%j

# module load intel/2023.1 intel-mpi/2021.9

export I_MPI_PMI_LIBRARY=/usr/lib/x86_64-linux-gnu/libpmi2.so
export I_MPI_FABRICS=shm:ofi
export I_MPI_DEBUG=4
export I_MPI_PIN_DOMAIN=core

# mpirun reads the host list and rank count from the Slurm environment.
mpirun -np "$SLURM_NTASKS" -ppn "$SLURM_NTASKS_PER_NODE" ./solver.x < INCAR > solver.log 2>&1
