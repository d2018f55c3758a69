#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 35189603111); e-mail addresses replaced
#SBATCH --array=1-9%9
#SBATCH --job-name=inter_3
#SBATCH --partition=wrobel
#SBATCH --output=inter_3.out
#SBATCH --error=inter_3.err

module purge
