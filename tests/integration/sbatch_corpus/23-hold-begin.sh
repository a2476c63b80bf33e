#!/bin/bash
# Models a job submitted in held state with a deferred start: it becomes
# eligible no earlier than an hour from now and only after a manual
# "scontrol release".
#SBATCH --job-name=nightly-report
#SBATCH --hold
#SBATCH --begin=now+1hour
#SBATCH --ntasks=1
#SBATCH --mem=500M
#SBATCH --time=00:10:00
#SBATCH --output=nightly-%j.out

date
./make_report.sh --since yesterday --to reports/
