#!/usr/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 4744846001); e-mail addresses replaced
# Name the job
#SBATCH --job-name=Kathleen.%j

### Start of Slurm SBATCH definitions
#SBATCH --ntasks=1
#SBATCH --tasks-per-node=64
#SBATCH --cpus-per-task=1
#SBATCH --partition=KathleenE
# Ask for the maximum memory per CPU
#SBATCH --mem=18000M

# Ask for up to 10 Minutes of runtime
#SBATCH --time=00:20:00



# Declare a file where the STDOUT/STDERR outputs will be written
#SBATCH --output=testslurm.%J


### end of Slurm SBATCH definitions
export BENCHMARKDIR=/home/u/test
