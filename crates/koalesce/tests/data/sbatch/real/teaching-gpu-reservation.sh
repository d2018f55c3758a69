#!/bin/bash
# koalesce corpus: header of a public GitHub file (library index id 28833620098); e-mail addresses replaced
# ALWAYS specify CPU and RAM resources needed as well as walltime
#SBATCH --partition=teaching_gpu
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --gres=gpu:1
#SBATCH --mem-per-cpu=2G
#SBATCH --time=0-00:05:00
#SBATCH --reservation=cce3015

# job parameters
#SBATCH --output=/opt/users/u/cce3015/ssh/out/make_clean.out
#SBATCH --error=/opt/users/u/cce3015/ssh/err/make_clean.err
#SBATCH --job-name=make 
#SBATCH --account=undergrad

# email user with progress
#SBATCH --mail-user=someone@example.edu
#SBATCH --mail-type=all

nvcc --version
