#!/bin/bash -l
# koalesce corpus: header of a public GitHub file (library index id 71647402887); e-mail addresses replaced
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=100G
#SBATCH --job-name=06_figure2
#SBATCH --time=12:00:00
#SBATCH --partition=general
#SBATCH --account=a_imb_cpdg
#SBATCH -o logs/%x.out
#SBATCH -e logs/%x.err

# 100G: the backfill loads the full plink genotype matrix
cd "${SLURM_SUBMIT_DIR}"
