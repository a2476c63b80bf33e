#!/bin/bash
# Models packing many small independent runs into one allocation: each srun is
# a single-CPU job step sent to the background, and --exact keeps steps from
# overlapping so they queue for free CPUs inside the job.
#SBATCH --job-name=packed
#SBATCH --nodes=2
#SBATCH --ntasks=4
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=300M
#SBATCH --time=02:00:00
#SBATCH --output=packed-%j.out

for n in $(seq 1 20); do
    srun --ntasks=1 --cpus-per-task=1 --exact --mem-per-cpu=300M \
        ./mc_sample --seed "$n" --out "samples/seed_$n.dat" &
done
wait
echo "All samples finished"
