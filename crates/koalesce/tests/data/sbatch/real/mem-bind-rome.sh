#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 40453244453)
#SBATCH --partition=rome
#SBATCH --time=00:30:00
#SBATCH --job-name=Connected-Components-Detection-OpenMPI+OpenMP
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --mem-per-cpu=2G
#SBATCH --mem-bind=local
#SBATCH --output=benchmarks/rome-4-16-%j.out
#SBATCH --error=slurm-%j.err

set -euo pipefail
