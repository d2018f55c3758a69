#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 54101814795); e-mail addresses replaced
#SBATCH -J g_equation_ncu
#SBATCH -N 1
#SBATCH -t 0:30:00
#SBATCH -p combust
#SBATCH --exclusive
#SBATCH --gres=gpu:1
#SBATCH --ntasks-per-node=1
#SBATCH --hint=nomultithread
#SBATCH --output=log/slurm-%j.out
#SBATCH --error=log/slurm-%j.err

source $MODULESHOME/init/bash
