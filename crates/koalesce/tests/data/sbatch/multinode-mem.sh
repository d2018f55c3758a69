#!/bin/bash -l
#SBATCH -J mpi_job
#SBATCH -N 2
#SBATCH --ntasks-per-node=8
#SBATCH --mem=16G
#SBATCH -t 1-12:00:00
#SBATCH -o %x-%j.out
#SBATCH -e %x-%j.err

srun ./mpi_app
