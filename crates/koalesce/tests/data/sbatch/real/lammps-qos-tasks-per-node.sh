#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 8716242791); e-mail addresses replaced
# Name of the job
#SBATCH --job-name=aSiGAP

# Submission details
#SBATCH --qos=regular
# SBATCH --time=10
#SBATCH --nodes=4
#SBATCH --tasks-per-node=32 # fastest is 2 cpus per task (haswell has 2 cpus per core). I would do more but then we run into memory issues
#SBATCH --cpus-per-task=2
#SBATCH --mem=118G   # max memory haswell is 118G, knl is 87G
#SBATCH -t 1-12:00                      # Runtime in D-HH:MM format
#SBATCH --array=0-9

# Outputs
#SBATCH -o 'outputs/cSiaSiMD-%j.output' #File to which STDOUT will be written
#SBATCH --mail-user="someone@example.edu"
#SBATCH --mail-type=END
#SBATCH --mail-type=FAIL

export OMP_NUM_THREADS=1
