#!/bin/bash -l
# koalesce corpus: header of a public GitHub file (library index id 71614678680); e-mail addresses replaced
#SBATCH --gres=gpu:v100:1
#SBATCH --partition=v100
#SBATCH --time=01:30:00
#SBATCH --export=NONE
#SBATCH --job-name=p5_gap
#SBATCH --output=dino_analysis/results/run_%j.out
#
unset SLURM_EXPORT_ENV
