#!/bin/bash
# Models a script written on an old Latin-1 editor: the comments contain
# non-UTF-8 bytes (Universität Zürich, résumé of the run).
# Préparation des données avant le calcul principal.
#SBATCH --job-name=latin1
#SBATCH --ntasks=2
#SBATCH --nodes=1
#SBATCH --mem-per-cpu=500M
#SBATCH --time=00:30:00
#SBATCH --output=latin1-%j.out

# Calcul de la moyenne sur les deux tâches.
srun ./moyenne --input donnees/ --output resultats/
