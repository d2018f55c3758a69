#!/bin/bash -l
# koalesce corpus: header of a public GitHub file (library index id 1201916); e-mail addresses replaced
#SBATCH --time=0-0:30:00
#SBATCH --nodes=1
#SBATCH --array=60-126
#SBATCH --job-name=mf
#SBATCH --tasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=1000M
#SBATCH --mail-user=someone@example.com
#SBATCH --mail-type=END
#SBATCH --output=mf%a-%j.out

# change to directory
cd /home/u/mf$SLURM_ARRAY_TASK_ID
