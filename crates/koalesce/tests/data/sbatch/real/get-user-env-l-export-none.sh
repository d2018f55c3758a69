#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 29239757145); e-mail addresses replaced
#SBATCH --mem=80gb
#SBATCH --time=00:59:00
#SBATCH --cpus-per-task=16
#SBATCH --export=NONE
#SBATCH --get-user-env=L
#SBATCH --partition=regular

SAMPLE_ID="$(basename "$1")"
