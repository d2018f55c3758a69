#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 22245022872); e-mail addresses replaced

#SBATCH --output=slurm_%j.out
#SBATCH --error=slurm_%j.err
#SBATCH --mail-user someone@example.ch
#SBATCH --mail-type=BEGIN
#SBATCH --mail-type=END
#SBATCH --mail-type=FAIL

#SBATCH --job-name=psfisher2_500_600_cst_survey_center
#SBATCH --partition=private-dpt-cpu
###SBATCH --partition=debug-cpu
#SBATCH --time=7-00:00:00
###SBATCH --time=00:15:00
###SBATCH --nodes=1
#SBATCH --ntasks=1
###SBATCH --ntasks-per-node=1
#SBATCH --array=0-40
#SBATCH --cpus-per-task=16

source /home/u/mmode/load_modules_and_env.sh
