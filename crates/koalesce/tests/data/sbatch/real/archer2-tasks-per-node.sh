#!/bin/bash --login
# koalesce corpus: header of a public GitHub file (library index id 9885275921); e-mail addresses replaced

#SBATCH --job-name=lammps_test
#SBATCH --nodes=4
#SBATCH --ntasks=512
#SBATCH --tasks-per-node=128
#SBATCH --cpus-per-task=1
#SBATCH --time=00:20:00

# Replace [budget code] below with your project code (e.g. t01)
#SBATCH --account=t01
#SBATCH --partition=standard
#SBATCH --qos=standard

# Load the relevant LAMMPS module
module load lammps
