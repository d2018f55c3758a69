#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 49489349413); e-mail addresses replaced
#SBATCH -A mobility_arfs
#SBATCH --partition ihub
#SBATCH -n 15
#SBATCH --gres=gpu:2
#SBATCH --mem-per-cpu=2048
#SBATCH --time=4-00:00:00
#SBATCH --mail-type=END
#SBATCH -w gnode109


python train_step2.py
