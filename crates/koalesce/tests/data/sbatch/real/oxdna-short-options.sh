#!/bin/bash -l
# koalesce corpus: header of a public GitHub file (library index id 192898); e-mail addresses replaced
# Standard output and error:
#SBATCH -o ./job.%j.out
#SBATCH -e ./job.%j.err
# Initial working directory:
# Job name
#SBATCH -J N32768
#
#SBATCH -N 1
#SBATCH -n 1
#SBATCH -c 1
#SBATCH --constraint="gpu"
#
#SBATCH --gres=gpu:a100:1
#SBATCH --mem=10000
#
#SBATCH --time=1-00:00:00

module purge
