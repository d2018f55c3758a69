#!/bin/bash                       # Use the bash shell interpreter
# koalesce corpus: header of a public GitHub file (library index id 33791744593); e-mail addresses replaced
#SBATCH -J run_singler            # Give the job a name
#SBATCH --time=2:00:00            # Request 2 hours
#SBATCH -n 1                      # Request 1 core
#SBATCH -N 1                      # Request 1 node
#SBATCH --mem=10Gb                # Request 10 Gb
#SBATCH --output=%j.out           # Write the job output to a file prefixed by the job number
#SBATCH --error=%j.err            # Write the job error to a file prefixed by the job number
 
module purge                      # Remove loaded modules
