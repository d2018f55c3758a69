#!/bin/sh -l
# koalesce corpus: header of a public GitHub file (library index id 46563933132); e-mail addresses replaced
#SBATCH --account=da-cpu
#SBATCH -o test-gfortran_8.3.0_mpiuni_g.bat_%j.o
#SBATCH -e test-gfortran_8.3.0_mpiuni_g.bat_%j.e
#SBATCH --time=1:00:00
#SBATCH --partition=orion
#SBATCH --qos=batch
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=40
#SBATCH --exclusive
export JOBID=$SLURM_JOBID
