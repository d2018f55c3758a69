#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 42533560721); e-mail addresses replaced
#SBATCH -A lu2021-2-124
#SBATCH -N 1
#SBATCH --tasks-per-node=8
#SBATCH -t 10:00:00
#SBATCH --mail-user=someone@example.se
#SBATCH --mail-type=FAIL
#SBATCH -J pred_prey
#SBATCH -o Logs/pred_prey.out
#SBATCH -e Logs/pred_prey.err
#SBATCH -D /home/u/Pred_prey_dynamics/pred-prey-ibm

module load matlab
