#!/bin/bash -l
# koalesce corpus: header of a public GitHub file (library index id 69876037995); e-mail addresses replaced

#SBATCH --job-name=test
#SBATCH --time=00:30:00
#SBATCH --nodes=1
#SBATCH --ntasks-per-core=1
#SBATCH --ntasks-per-node=32
#SBATCH --cpus-per-task=8
#SBATCH --account=myaccount
#SBATCH --hint=nomultithread
#SBATCH --hint=exclusive
#SBATCH --uenv=cp2k-openmp/2026.2:2776459744
#SBATCH --view=develop

export MPICH_GPU_SUPPORT_ENABLED=1
