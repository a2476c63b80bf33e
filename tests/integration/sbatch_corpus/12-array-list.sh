#!/bin/bash
# Models re-running only the array elements that failed last time, by giving
# an explicit comma-separated list of indices.
#SBATCH --job-name=rerun-failed
#SBATCH --array=1,3,5
#SBATCH --ntasks=1
#SBATCH --mem-per-cpu=800M
#SBATCH --time=10:00
#SBATCH --output=rerun_%A_%a.out

input=samples/sample_$(printf '%03d' "$SLURM_ARRAY_TASK_ID").fastq.gz
echo "Reprocessing $input (element $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT)"

# module load bwa samtools
# bwa mem -t 1 ref/genome.fa "$input" | samtools sort -o "aligned/$(basename "$input" .fastq.gz).bam"
zcat "$input" | wc -l
