#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 36478512309); e-mail addresses replaced
#SBATCH --job-name=EarlyProcessing
#SBATCH --account=rrg-markpb68
#SBATCH --time=0:50:00
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16000
#SBATCH --mail-user=someone@example.com
#SBATCH --mail-type=ALL

module load matlab/2020a
