#!/bin/bash -l
# koalesce corpus: header of a public GitHub file (library index id 45348350100); e-mail addresses replaced
#SBATCH --job-name="SF-2022"
#SBATCH --partition=RGZN8
#SBATCH --qos=normal
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --ntasks-per-core=1
#SBATCiH --output=jobout/job.%j.out
#SBATCH --error=jobout/joberror.%j.out
#SBATCH --gpus=0


source activate py310
