#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 8245025634); e-mail addresses replaced
#SBATCH --nodes 4
#SBATCH --exclusive
#SBATCH --account ucb1_summit4
#SBATCH --time 16:00:00
#SBATCH --output /scratch/summit/u/exa_slurm_output/fluid_bed_%j

#Inputs
export COMMIT_HASH=$1
