#!/bin/bash
# Models the e-mail notification example: mail when the job starts, ends or
# fails, sent to an explicit address rather than the local user.
#SBATCH --job-name=notify-me
#SBATCH --mail-type=BEGIN,END,FAIL
#SBATCH --mail-user=alice@example.org
#SBATCH --ntasks=1
#SBATCH --mem=1G
#SBATCH --time=02:00:00
#SBATCH --output=%x-%j.out

# module load matlab/R2023a
matlab -nodisplay -nosplash -batch "run_study('config.json')"
