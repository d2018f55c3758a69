#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 27252684731); e-mail addresses replaced
#SBATCH --time=100:00:00
#SBATCH --ntasks=1
#SBATCH --mem=16GB
#SBATCH --account=lc_dvc
#SBATCH --partition=conti
#SBATCH --array=1-5

# submit to slurm or just run script (if small number of SNPs) using bash
