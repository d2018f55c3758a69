#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 382842); e-mail addresses replaced
#SBATCH --job-name=convert_to_llava_format_eng
#SBATCH --output=convert_to_llava_format_eng.out
#SBATCH --error=convert_to_llava_format_eng.err
#SBATCH --partition=debug
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --mail-user=someone@example.edu
#SBATCH --mail-type=START,END,FAIL

echo $SLURM_JOB_ID
