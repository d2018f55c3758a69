#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 17877497051); e-mail addresses replaced


#SBATCH --job-name=otsh_array_impute
#SBATCH --partition=standard
#SBATCH --open-mode=append
#SBATCH --output=03a_imputed_vcf/00_log_folder/beagle_chr.%A_%a.out
#SBATCH --error=03a_imputed_vcf/00_log_folder/beagle_chr.%A_%a.err
#SBATCH --mail-user=someone@example.ca
#SBATCH --time=36:00:00
#SBATCH --nodes=1
#SBATCH --cpus-per-task=64
#SBATCH --mem=110GB
#SBATCH --account=grdi_genarcc
#SBATCH --array=1-34


# Source conda environment.

source ~/bioinfo/mambaforge/etc/profile.d/conda.sh
