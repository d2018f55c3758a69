#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 71655327568); e-mail addresses replaced
#
#SBATCH -J naiss2024-22-1100-dmh
#SBATCH -t 64:00:00
#SBATCH --mem=16000
#SBATCH -n 1
#SBATCH --array=0-3
#SBATCH --mail-type=ALL
#SBATCH --mail-user=someone@example.se

#=
tasks=(
