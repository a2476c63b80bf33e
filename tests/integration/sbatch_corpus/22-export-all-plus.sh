#!/bin/sh
# Models passing extra variables on top of the whole submission environment.
#SBATCH --job-name=export-extra
#SBATCH --export=ALL,FOO=bar,DATASET=cifar10
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=00:20:00
#SBATCH --output=%x-%j.out

echo "FOO=$FOO DATASET=$DATASET"
python3 prepare.py --dataset "$DATASET" --tag "$FOO"
