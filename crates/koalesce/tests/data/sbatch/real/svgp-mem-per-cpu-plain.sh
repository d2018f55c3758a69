#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 38294387307); e-mail addresses replaced
#SBATCH --job-name=svgp_0_3logs.txt
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --mem-per-cpu=4571
#SBATCH --time=05:00:00

module purge
